"""Job.wait()'s progress bar (docs/python.md, Reference): tqdm, imported
when a bar is drawn; none without it."""


def _tqdm():
    """tqdm.auto's choice without its warning: the widget bar in a Jupyter
    kernel that has ipywidgets, else the text bar (which a notebook shows as
    well); None without tqdm. tqdm.auto picks the widget bar in any kernel
    and, without ipywidgets, warns (TqdmWarning "IProgress not found") into
    the notebook."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        return None
    try:
        from IPython import get_ipython
        kernel = get_ipython() is not None and "IPKernelApp" in get_ipython().config
    except ImportError:
        kernel = False
    if kernel:
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm
        except ImportError:
            pass
    return tqdm


def progress_bar(job_id):
    tqdm = _tqdm()
    if tqdm is None:
        return None
    # No {remaining}: tqdm's own estimate extrapolates the bar's rate, which
    # the phases' unequal costs make wrong; the server's ETA is in the postfix.
    return tqdm(total=1000, desc=f"job {job_id}", unit="‰",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}")


def show_progress(bar, p):
    bar.n = int(round(max(0.0, min(1.0, p.fraction)) * bar.total))
    phase = f"{p.model} {p.phase}" if p.model else p.phase
    if p.windows_total:
        phase += f" {p.windows_done}/{p.windows_total}"
    if p.eta_seconds > 0:
        phase += f", about {bar.format_interval(p.eta_seconds)} left"
    bar.set_postfix_str(phase, refresh=False)
    bar.refresh()
