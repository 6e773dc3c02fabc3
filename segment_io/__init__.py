"""segment_io: read and write Kafka log segments through Arrow, without Spark."""
