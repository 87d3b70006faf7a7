"""A worker ends like a multiprocessing child: output flushed, status kept, no finalization.

Interpreter finalization is where a torch distributed object that outlived
destroy_process_group aborted a rank now and then (dreamddp.run.dist_env.exit_worker),
so a worker must not reach it; what it printed must still arrive.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_exit_worker_flushes_keeps_the_status_and_skips_finalization(tmp_path):
    marker = tmp_path / "finalized"
    script = textwrap.dedent(f"""
        import atexit, logging, sys
        atexit.register(lambda: open({str(marker)!r}, "w").close())
        logging.basicConfig(stream=sys.stderr, level=logging.INFO)
        logging.getLogger("w").info("logged")
        print("printed", end="")  # a pipe is block-buffered: lost unless flushed
        from dreamddp.run.dist_env import exit_worker
        exit_worker(3)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "printed"
    assert "logged" in done.stderr
    assert not marker.exists()  # atexit (finalization) never ran


def test_exit_worker_takes_a_code_as_sys_exit_does():
    for code, status, stderr in (("None", 0, ""), ("'stopped: reason'", 1, "stopped: reason\n")):
        done = subprocess.run([sys.executable, "-c", f"from dreamddp.run.dist_env import exit_worker; exit_worker({code})"],
                              capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stderr) == (status, stderr)
