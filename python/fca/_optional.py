"""The optional packages fca's extras use (pandas, matplotlib), imported when
first needed, with one message naming what to install."""

import importlib


def require(module, purpose, apt_package, pip_package):
    """`module` imported, or ImportError saying what needs it and how to
    install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - depends on the system
        raise ImportError(f"fca: {purpose} needs {pip_package} (apt install {apt_package}, "
                          f"or pip install {pip_package})") from e


def available(module):
    """Whether `module` can be imported."""
    try:
        importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the system
        return False
    return True
