"""`walk_run_folders`: every run folder under a root, through links to folders, each folder once (real folders
first), with the links it does not follow and the folders it cannot list named."""
import os

from dgmoe.engine.runtree import walk_run_folders


def _run(folder):
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("")
    return folder


def test_links_are_followed_once_real_folders_first_and_the_rest_named(tmp_path):
    root = tmp_path / "root"
    _run(root / "z_real")
    outside = _run(tmp_path / "outside" / "run")
    (root / "a_link").symlink_to(root / "z_real", target_is_directory=True)  # sorts first, read second
    (root / "outside").symlink_to(outside.parent, target_is_directory=True)
    (root / "z_real" / "up").symlink_to(root, target_is_directory=True)  # a loop
    (root / "gone").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    _run(root / ".run.123.partial")
    tree = walk_run_folders(root, "results.jsonl", skip=lambda name: name.endswith(".partial"))
    assert tree.found == [root / "outside" / "run", root / "z_real"]
    assert not tree.unreadable
    named = "\n".join(tree.links)
    assert f"{root / 'a_link'} (a link to {root / 'z_real'}, read once already)" in named
    assert f"{root / 'z_real' / 'up'} (a link to {root}, read once already)" in named
    assert f"{root / 'gone'} (a link to {tmp_path / 'nowhere'}, which does not exist)" in named


def test_a_folder_that_cannot_be_listed_is_named_with_the_reason(tmp_path, monkeypatch):
    _run(tmp_path / "mine")
    _run(tmp_path / "theirs")
    scandir, blocked = os.scandir, str(tmp_path / "theirs")

    def umask_077(path="."):  # another user's folder made under umask 077, as it reads to us (we may be root)
        if os.fspath(path) == blocked:
            raise PermissionError(13, "Permission denied", blocked)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", umask_077)
    tree = walk_run_folders(tmp_path, "results.jsonl")
    assert tree.found == [tmp_path / "mine"]
    assert tree.unreadable_named() == [f"{tmp_path / 'theirs'} (permission denied)"]
