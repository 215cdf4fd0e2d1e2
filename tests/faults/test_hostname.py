"""A machine whose own name does not resolve (common on macOS, where gloo then fails with "The IPv6
network addresses of (NAME.local, PORT) cannot be retrieved"), made here for real: a UTS namespace
(`unshare -u`, root only) with a hostname nothing resolves. The lab's launcher pins 127.0.0.1 and
runs; plain torchrun looks the name up and retries for minutes; the doctor says WARN and the fix."""

import shutil
import subprocess
import sys
import time

import pytest

from harness import WORKERS
from minitrain.launch import stop_process_tree

NAME = "nosuchhost-minitrain"


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _can_unshare(), reason="needs `unshare -u` (Linux, root)")


def under_unresolvable_hostname(*command: str) -> subprocess.Popen:
    """Run `command` in a new UTS namespace whose hostname does not resolve."""
    script = f"hostname {NAME} && exec \"$@\""
    return subprocess.Popen(["unshare", "-u", "sh", "-c", script, "sh", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_the_lab_runs_where_the_hostname_does_not_resolve_and_the_doctor_warns():
    doctor = under_unresolvable_hostname(sys.executable, "-m", "minitrain.doctor")
    report, _ = doctor.communicate(timeout=60)
    assert doctor.returncode == 0, report  # a WARN, not a FAIL
    assert "WARN  hostname" in report and f"{NAME} does not resolve" in report
    assert f"add the line `127.0.0.1 {NAME}` to /etc/hosts" in report

    run = under_unresolvable_hostname(sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2",
                                      str(WORKERS), "clean")
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 0, out
    assert out.count("done, sum [2.0, 2.0, 2.0, 2.0]") == 2


def test_plain_torchrun_looks_the_name_up_and_retries():
    proc = under_unresolvable_hostname(sys.executable, "-m", "torch.distributed.run", "--standalone",
                                       "--nproc-per-node=2", str(WORKERS), "clean")
    seen, deadline = [], time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if f"The IPv6 network addresses of ({NAME}, " in line and "cannot be retrieved" in line:
                break
        else:
            pytest.fail("no lookup failure within 60 s:\n" + "".join(seen))
        assert proc.poll() is None  # still retrying, not finished: the run would hang for minutes
    finally:
        stop_process_tree(proc, grace=2)
    assert any("cannot be retrieved" in line for line in seen), "".join(seen)
