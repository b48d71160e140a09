"""Python tools the tests name in team files (`tests.pytools_fixture.tools:...`); importable by
the test workers, which run with the repository root as their working directory."""
