"""Measurements: ``python -m specjax.bench <task> [flags]`` (tasks in ``specjax.bench.__main__.TASKS``)."""
