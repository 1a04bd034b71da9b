"""Every program gym-repost runs inside the sandbox, and the one protocol they speak.

These modules are data for the host: their text is copied into a run directory and run
there by the sandbox's ``python3``. They import only the standard library (plus pytest
and coverage.py where the program needs them) and each other, never ``gym_repost``;
nothing on the host imports them to run them (tests import a few pure helpers).

Programs (``gym_repost/programs/{name}.py``, in the run directory ``_gym_repost_{name}.py``):

* ``harness``: runs a function task's evaluation script and records the target's calls
  (host: :mod:`gym_repost.harness`);
* ``coverage``: line and branch coverage of one function under a task's tests
  (host: :mod:`gym_repost.harness.coverage`);
* ``testfile``: runs a test file against its focal file: outcomes, coverage, mutants,
  with its modules ``testfile_zygote``, ``testfile_session`` and ``testfile_replay``
  (host: :mod:`gym_repost.harness.testfile`);
* ``matrix``: runs one code against a list of tests, each in a child process
  (host: :mod:`gym_repost.data.matrix`);
* ``trace``: runs a repository's own tests and records the arguments passed to targets
  (host: :mod:`gym_repost.construct.testgen.trace`);
* ``explore``: searches inputs for one target and chooses a test's inputs, with its
  modules ``hints``, ``pools``, ``mutate``, ``strategies``, ``selection`` and ``runtime``
  (``runtime`` is also pasted into the generated tests) (host:
  :mod:`gym_repost.construct.testgen.explore`).

The protocol, written once: ``protocol`` in the sandbox (copied beside every program as
``_gym_repost_protocol.py``), :mod:`gym_repost.sandbox.programs` on the host.

1. Standard input: the configuration's length in bytes on a line, the configuration as
   one line of JSON, and, for a program given one, a one-time completion token on the
   next line. ``protocol.read_config()`` reads exactly the configuration and points
   standard input at ``/dev/null``; the token waits in the pipe on a private descriptor
   until ``protocol.read_token()``, so a program can read it after forking the processes
   that run the code under test (which close their copy with ``protocol.drop_token()``)
   or after they have finished.
2. Standard output: the result, one line ``@@gym-repost@@result `` + a JSON object
   (``@@gym-repost@@result-z `` + base64 of its zlib compression for large results),
   written with ``protocol.write_result()`` in one loop over ``os.write``, then, for a
   program given a token and only when it completed, ``@@gym-repost@@end `` + the token
   on the next line. The rest of the output is the code under test's.
3. On the host, ``run_program()`` ships the program, its modules and the protocol, passes
   the configuration and a fresh token, and reads the result line within
   :mod:`gym_repost.bounded_json`'s limits. With a token, the run completed when its last
   line is the token's, and the result is the line right before it; otherwise the result
   is the last result line (a program that did not complete may still have reported).
   A missing, malformed or forged result is data (:attr:`ProgramRun.problem`), never an
   exception: each host decides what the program's silence means.

May import: nothing (the standard library, pytest and coverage.py, inside the sandbox).
"""
