"""picluster: Raspberry Pi parameter-server clusters for distributed TensorFlow."""

__version__ = "0.1.0"
