"""The processes the platform starts and stops: the Spark service, a Spark standalone cluster, a Kafka
broker and an S3 server, each with one start/status/stop shape over lakehouse.services.process."""
