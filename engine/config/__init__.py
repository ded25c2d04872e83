"""Configuration: the production file, the modules it names, its cron strings and routing rules."""
