"""The ``encore`` command line: ``commands`` holds the group (``encore = engine.cli.commands:main``)
and the commands of the message store; ``operator`` the operator's; ``report`` renders rows."""
