"""The construction pipeline: repositories in, function and test-file tasks out.

See :mod:`gym_repost.construct.pipeline` for the stages, :mod:`~gym_repost.construct.agent`
for the construction agent's tools, and its policies: :mod:`~gym_repost.construct.builder`
(deterministic) and :mod:`~gym_repost.construct.llm_builder` (a model following RepoST).

May import: analysis, context, errors, executor, harness, llm, prompting, sandbox, task, tools.
"""
