"""Block C's grader (graders.grade_train_script) on real 2-process runs of train.py: the reference passes, a
right answer in another form passes (the reference: notebook 04's grader cell), the student edition's blank is "not done", and each plausible mistake
(a hurried shortcut, the sheet's skeleton taken literally, a GPU tutorial's habit) fails naming itself.
Each mistaken train.py is the reference with one change; they are graded three at a time."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minitrain.lab.grading.graders import ExerciseError
from minitrain.lab.grading.graders.training import grade_train_script
from minitrain.lab.todos.blank import told
from minitrain.paths import TRAIN_SCRIPT
from minitrain.todo import NotDone

SETUP_SEED = "    seed = args.seed + rank  # different per rank; DDP broadcasts rank 0's weights anyway\n"
STEP_RETURN = '''    return {"loss": loss.item(), "step_ms": (t3 - t0) * 1e3, "forward_ms": (t1 - t0) * 1e3,
            "backward_ms": (t2 - t1) * 1e3, "optimizer_ms": (t3 - t2) * 1e3}'''
NO_SYNC = "    with controls.maybe_no_sync(model, no_sync):  # --no-sync: no all-reduce at all\n"

CASES = {  # name -> ([(reference text, the learner's text)], what the grader must say; None: PASS)
    "another form": ([  # right: torch.manual_seed, one clock per part, zero_grad() with its default
        ("    seed_everything(seed)\n", "    torch.manual_seed(seed)\n"),
        ("    optimizer.zero_grad(set_to_none=True)\n", "    optimizer.zero_grad()\n"),
        (STEP_RETURN, '''    step_ms = (time.perf_counter() - t0) * 1e3
    return dict(loss=float(loss.detach()), forward_ms=(t1 - t0) * 1e3, backward_ms=(t2 - t1) * 1e3,
                optimizer_ms=(t3 - t2) * 1e3, step_ms=step_ms)''')], None),
    # a hurried learner's shortcuts
    "one seed for all ranks": ([(SETUP_SEED, "    seed = args.seed\n")], "both ranks ran with seed 35000"),
    "wrap_for_ddp, not wrap": ([("    model = wrap(model)\n", "    model = wrap_for_ddp(model)\n")],
                               "failed: ContractError: train.py's setup() never called its `wrap` argument"),
    "the loss tensor": ([('{"loss": loss.item(),', '{"loss": loss,')],
                        "ContractError: train.py's train_step() returned loss as a Tensor"),
    "no zero_grad": ([("    optimizer.zero_grad(set_to_none=True)\n", "")], "the gradients pile up"),
    "lr hard-coded": ([("lr=args.lr", "lr=1e-3")], "the ranks agree, but not with DDP's arithmetic"),
    "no_sync left out": ([(NO_SYNC, "    if True:\n")], "with --no-sync an all-reduce still ran"),
    # the sheet's skeleton taken literally: a clock around forward and backward, loss.backward()
    "step_ms without the optimizer": ([('"step_ms": (t3 - t0) * 1e3', '"step_ms": (t2 - t0) * 1e3')],
                                      "step_ms must span the whole step"),
    "loss.backward()": ([("        timed_backward(loss, timers)  # DDP's all-reduce fires in here\n",
                          "        loss.backward()\n")], "no timer measured backward"),
    "seconds": ([(STEP_RETURN, STEP_RETURN.replace(" * 1e3", ""))], "these look like seconds"),
    # a GPU tutorial's habits
    "model.module forward": ([("        loss = model(batch).loss\n", "        loss = model.module(batch).loss\n")],
                             "no all-reduce ran in any step"),
    "cuda.synchronize": ([("    t3 = time.perf_counter()\n", "    torch.cuda.synchronize()\n    t3 = time.perf_counter()\n")],
                         "train.py's 2-process run failed: the lab runs on CPUs"),
}


def _script(tmp_path: Path, name: str, edits: list[tuple[str, str]]) -> Path:
    text = TRAIN_SCRIPT.read_text()
    for old, new in edits:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    path = tmp_path / name.replace(" ", "-") / "train.py"
    path.parent.mkdir()
    path.write_text(text)
    return path


def _verdict(script: Path, corpus_dir: Path) -> str:
    try:
        return "PASS: " + grade_train_script(script, corpus_dir)
    except ExerciseError as e:
        return str(e)
    except NotDone as e:  # a blank: what the learner reads of it
        return told(e)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, corpus_dir, student_tree) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("train-grader")
    scripts = {name: _script(tmp, name, edits) for name, (edits, _) in CASES.items()}
    scripts["blank"] = student_tree / "experiments" / "35-ddp-cpu" / "train.py"
    with ThreadPoolExecutor(3) as pool:
        return dict(zip(scripts, pool.map(lambda s: _verdict(s, corpus_dir), scripts.values())))


@pytest.mark.parametrize("name", list(CASES))
def test_each_train_py_is_graded_by_its_mistake(verdicts, name):
    expected = CASES[name][1]
    if expected is None:
        assert verdicts[name].startswith("PASS: Block C: correct."), verdicts[name]
    else:
        assert expected in verdicts[name], verdicts[name]


def test_the_blank_stub_is_not_done(verdicts):
    assert verdicts["blank"].startswith("not done yet: Block C: setup"), verdicts["blank"]

