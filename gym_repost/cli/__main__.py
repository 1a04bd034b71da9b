"""``python -m gym_repost.cli``."""

from gym_repost.cli import main

main()
