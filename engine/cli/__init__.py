"""The ``encore`` command line: ``commands`` holds the group (``encore = engine.cli.commands:main``)
and registers every command, each in the module of its subject (``run``, ``send``,
``listing``, ``status``, ``database``, ``operator``, ...); ``report`` renders rows."""
