"""The peer brokers of the paper's comparison (RabbitMQ and ActiveMQ), each installed
from Debian's packages and run privately: on loopback, with its data under a temporary
directory, stopped when the benchmark is done with it."""
