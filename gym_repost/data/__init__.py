"""Training data from tasks: rejection sampling, DSTC preference pairs, AceCoder pairs.

* :mod:`gym_repost.data.rejection`: SFT records from the passing solutions of an
  evaluation run, optionally with failed solutions repaired from their test report.
* :mod:`gym_repost.data.dstc`: DSTC's minimax selection over a code x test execution
  matrix (:func:`~gym_repost.data.dstc.minimax_select`), DPO and KTO records.
* :mod:`gym_repost.data.acecoder`: AceCoder's test filtering by a proxy solution and pair
  rule over pass rates (:func:`~gym_repost.data.acecoder.preference_pairs`).
* :mod:`gym_repost.data.repo_smith`: Repo-Smith's test-file data (generate, guided repair,
  compressed reasoning), the ``data testgen`` command.
* :mod:`gym_repost.data.base`: the sampler and repairer protocols;
  :mod:`gym_repost.data.samplers`: the offline samplers and the spec registry;
  :mod:`gym_repost.data.llm_samplers`: the ``llm:PROVIDER/MODEL`` samplers and repairer;
  :mod:`gym_repost.data.matrix`: execution matrices, one sandboxed process per code.

Output is JSON Lines that ``datasets.load_dataset("json", ...)`` and TRL's trainers read.

May import: analysis, context, env, errors, evaluate, executor, harness, llm, policy, prompting, sandbox, task.
"""

from gym_repost.data.base import CodeSampler, Repairer, TestSampler, TestSuite

__all__ = ["CodeSampler", "Repairer", "TestSampler", "TestSuite"]
