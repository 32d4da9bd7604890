"""The commands of ``python -m specjax.train <task>``: one module per task, each with ``main(argv) -> int``."""
