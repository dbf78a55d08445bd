"""What analysts read: SQL over the tables and views, and a pipeline's status."""
