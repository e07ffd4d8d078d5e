"""Allow ``python -m nanobot_core``."""

from nanobot_core.cli import main

if __name__ == "__main__":
    main()
