"""The output folder check (`core.paths.output_dir`): proves a folder writable with a probe file."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rooflint.core.paths import output_dir


def test_processes_proving_one_folder_at_once_do_not_delete_each_other_s_probe(tmp_path):
    # Two benches writing into one folder (or two CI jobs in one checkout) check it at the same time.
    # With one shared probe name, one check's unlink could remove the other's probe between that
    # one's write and its unlink: "No such file or directory", a false "cannot write".
    folder = tmp_path / "rooflint-out"

    def check(_):
        for _ in range(100):
            output_dir(folder)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, range(8)))
    assert folder.is_dir() and list(folder.iterdir()) == []  # no probe left behind
