"""What a pipeline computes, as pure declarations and DataFrame transforms shared by both layers."""
