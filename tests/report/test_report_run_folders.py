"""`dgmoe results` and `dgmoe report` follow symbolic links to run folders (runs gathered from several disks into
one root), each folder once, and name the links they do not follow (a loop, a second link, a link to nothing)."""
from recipe_sweep import write_run

DEBUG = ("0", "1", "2")
MICRO = "vit_micro_patch7_28"


def _gathered(tmp_path):
    write_run(tmp_path / "disk1" / "erm", "Debug28", DEBUG, "ERM", MICRO, [0], {0: 0.3, 1: 0.6, 2: 0.7})
    write_run(tmp_path / "disk2" / "coral", "Debug28", DEBUG, "CORAL", MICRO, [0], {0: 0.4, 1: 0.6, 2: 0.7})
    root = tmp_path / "gathered"
    root.mkdir()
    (root / "erm").symlink_to(tmp_path / "disk1" / "erm", target_is_directory=True)
    (root / "coral").symlink_to(tmp_path / "disk2" / "coral", target_is_directory=True)
    (root / "erm-again").symlink_to(tmp_path / "disk1" / "erm", target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "gone").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    return root


def _not_followed(output, root):
    lines = [line for line in output.splitlines() if line.startswith("warning: not followed: ")]
    return {name for name in ("erm-again", "loop", "gone") if any(str(root / name) in line for line in lines)}


def test_results_read_linked_run_folders_once_and_name_the_rest(tmp_path, cli):
    root = _gathered(tmp_path)
    result = cli("results", root, "--no-save", "--selection", "iid")
    assert result.exit_code == 0, result.output
    assert "2 records from 1 run" not in result.output and "4 records from 2 runs" in result.output
    assert "| ERM / vit_micro_patch7_28 " in result.output and "| CORAL / vit_micro_patch7_28 " in result.output
    assert "several run dirs" not in result.output  # the second link to one run is not a duplicate of it
    assert _not_followed(result.output, root) == {"erm-again", "loop", "gone"}


def test_report_reads_linked_run_folders(tmp_path, cli):
    root = _gathered(tmp_path)
    result = cli("report", root, "--no-params", "--out", tmp_path / "report")
    assert result.exit_code == 0, result.output
    assert _not_followed(result.output, root) == {"erm-again", "loop", "gone"}
    page = (tmp_path / "report" / "index.html").read_text()
    assert "CORAL / vit_micro_patch7_28" in page and "ERM / vit_micro_patch7_28" in page
