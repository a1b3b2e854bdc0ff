"""The ray executor (bench/sweeps/executors/ray.py) against a real Ray head started here on 127.0.0.1, and stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _nets import write

from bench.cli import main
from bench.runs.results import ResultsStore

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'resbench[ray]')")
pytestmark = pytest.mark.usefixtures("clean_plugins")

# A plugin variant whose run kills its own Ray worker process (SIGKILL) at its third training forward: a worker
# that dies mid-run. In the driver (the plugin check's forward) it is an ordinary net.
DIES = '''
import os
import signal
import sys

import torch
from torch import nn

import variants


class Dies(nn.Module):
    def __init__(self, num_classes: int, in_chans: int, die: bool) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(in_chans * 64, num_classes))
        self.calls, self.die = 0, die

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += self.training
        if self.die and self.calls >= 3 and any("default_worker" in a for a in sys.argv):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.head(x)


@variants.register("toy_lives", family="toy", paper="a test", die=False)
def build(*, num_classes: int = 10, in_chans: int = 3, die: bool = False) -> nn.Module:
    return Dies(num_classes, in_chans, die)


variants.register_preset("toy_dies", "toy_lives", die=True)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``ray start --head --block`` on 127.0.0.1 with 2 CPUs; the cluster goes when that process is stopped (not
    ``ray stop``, which would stop every Ray on the machine, another test run's included)."""
    port = free_port()
    tmp = tmp_path_factory.mktemp("ray")
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address",
           "127.0.0.1", "--port", str(port), "--num-cpus", "2", "--num-gpus", "0", "--include-dashboard=false",
           "--disable-usage-stats", "--temp-dir", str(tmp)]
    # No token authentication on this throwaway local cluster: Ray's default keeps one token in ~/.ray, which two
    # test runs on one machine (tox runs environments in parallel) would race for.
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Ray head did not start") from None
            time.sleep(0.5)
    yield address
    os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the head's raylet and GCS share its process group
    proc.wait()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


@pytest.mark.slow  # a local Ray cluster started: about 30 s
def test_a_sweep_on_a_ray_cluster_records_a_killed_worker_and_goes_on(
        head: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = write(tmp_path / "dies.py", DIES)
    study = write(tmp_path / "tiny.toml", """
        name = "tiny"
        vary = ["die"]
        [base]
        task = "digits"
        steps = 4
        batch_size = 16
        eval_every = 4
        measure = []
        [grid]
        variant = ["toy_lives", "toy_dies"]
        seed = [0]
    """)
    res = tmp_path / "res"
    code = main(["sweep", str(study), "--executor", "ray", "--address", head, "--jobs", "2", "--results-dir",
                 str(res), "--plugin", str(plugin), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    board = ResultsStore(res).load_leaderboard().set_index("variant")
    assert board.loc["toy_lives", "status"] == "ok" and board.loc["toy_dies", "status"] == "killed"
    assert board.loc["toy_dies", "error"].startswith("ray: ")
    run = ResultsStore(res).load_run(board.loc["toy_lives", "run_id"])
    assert run["placement"]["threads"] == 1 and run["placement"]["ray_node"]
    assert "1 of 2 runs ok, 1 failed" in out and "toy_dies" in out.split("failed runs:")[1]
    assert not ray.is_initialized()  # the driver let go of the cluster


def test_ray_options_and_a_missing_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write(tmp_path / "one.toml", """
        name = "one"
        [base]
        variant = "resnet"
        depth = 8
        steps = 2
        batch_size = 16
        measure = []
        [grid]
        seed = [0]
    """)
    code = main(["sweep", str(study), "--address", "127.0.0.1:1", "--results-dir", str(tmp_path / "r")])
    assert code == 2 and "--address, --cpus-per-run and --retries are options of --executor ray" in \
        capsys.readouterr().err
    code = main(["sweep", str(study), "--executor", "ray", "--cpus-per-run", "0", "--results-dir", str(tmp_path)])
    assert code == 2 and "--cpus-per-run must be >= 1" in capsys.readouterr().err
    code = main(["sweep", str(study), "--executor", "ray", "--address", f"127.0.0.1:{free_port()}",
                 "--results-dir", str(tmp_path / "r"), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2 and "error: cannot connect to the Ray cluster at 127.0.0.1:" in err


def test_without_ray_installed_the_executor_says_how(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    study = write(tmp_path / "one.toml", '[base]\nvariant = "resnet"\n[grid]\nseed = [0]\n')
    code = main(["sweep", str(study), "--executor", "ray", "--results-dir", str(tmp_path / "r")])
    assert code == 2 and "error: --executor ray needs the ray package: pip install 'resbench[ray]'" in \
        capsys.readouterr().err
