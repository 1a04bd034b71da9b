"""Policies: the agents that act in gym-repost environments.

See :mod:`gym_repost.policy.base` for the protocol a custom agent implements (it is given
a :class:`~gym_repost.task_view.TaskView`, never the answers) and
:mod:`gym_repost.policy.privileged` for the shipped controls that are handed the ground truth.

May import: analysis, context, errors, harness, llm, prompting, task, task_view, tools.
"""

from gym_repost.policy.base import Action, Policy, PrivilegedPolicy, tool_call
from gym_repost.policy.loader import PolicyFactory, load_policy
from gym_repost.policy.privileged import reset_policy

__all__ = ["Action", "Policy", "PolicyFactory", "PrivilegedPolicy", "load_policy", "reset_policy", "tool_call"]
