"""User-facing errors. Anything raised as a ``PruneScopeError`` is shown to the user as one
clear message (CLI: stderr + non-zero exit; app: st.error) without a traceback."""


class PruneScopeError(Exception):
    """Base class of the errors a user can fix by changing their input."""


class ConfigError(PruneScopeError, ValueError):
    """An invalid configuration value or combination."""


class ModelLoadError(PruneScopeError):
    """The model could not be found, loaded, or is of an unsupported kind."""


class DataError(PruneScopeError):
    """A corpus could not be found or is unusable (missing, empty, too short)."""


class StoreError(PruneScopeError):
    """The results store cannot be written or read."""


class StoreIndexError(StoreError):
    """The store's index (index.sqlite) is damaged; its run folders can rebuild it."""


class DamagedRunError(StoreError):
    """A stored run's folder is damaged (a file missing, cut short or unreadable): the
    message names the run, the file and the way out (``core.store.integrity``)."""

    def __init__(self, message: str, run_id: str = "", file: str = "") -> None:
        super().__init__(message)
        self.run_id, self.file = run_id, file


class NumericalError(PruneScopeError):
    """A numerical procedure failed (e.g. a Hessian that stays non positive-definite)."""


class SweepError(PruneScopeError):
    """Some runs of a sweep failed (the others are stored; rerunning resumes)."""


class DeviceMemoryError(PruneScopeError):
    """The compute device ran out of memory; the message names the options that help."""
