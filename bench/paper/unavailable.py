"""A system the paper benchmark cannot run on this machine (a peer whose runtime is
missing): its column is left out of the table and the plot, with the reason, and the
other systems' runs stand; unlike a failure part-way, it does not fail the benchmark."""


class SystemUnavailable(RuntimeError):
    """Raised by a system's constructor; the message says why it cannot run here."""
