"""Output files are written whole or not at all (sim.output_file): a write that fails part-way leaves no
truncated file and keeps the earlier one, its error names the output, and devices and links are honoured."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import file_size_limit

from sim.output_file import append_line, output_file


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".partial-" in p.name)


def test_a_complete_write_replaces_the_file_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old\n")
    path.chmod(0o600)
    with output_file(path) as fh:
        fh.write("new\n")
    assert path.read_text() == "new\n" and leftovers(tmp_path) == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_write_that_fails_part_way_keeps_the_earlier_file_and_leaves_no_partial_one(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with output_file(path) as fh:
            fh.write("half of the new rows\n")
            raise RuntimeError("the exporter failed")
    assert path.read_text() == "old\n" and leftovers(tmp_path) == []


def test_a_full_disk_is_an_error_naming_the_output_and_leaves_nothing(tmp_path):
    """The file-size limit gives a write error with no file name, as a full disk does (``[Errno 28]``)."""
    path = tmp_path / "big.mot"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from sim.output_file import output_file
        try:
            with output_file({str(path)!r}) as fh:
                for _ in range(1000):
                    fh.write("0.004\\t" * 20 + "\\n")
        except OSError as exc:
            print(exc.errno, exc.filename)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=file_size_limit(4096))
    assert done.stdout.split() == [str(errno.EFBIG), str(path)], done.stderr
    assert not path.exists() and leftovers(tmp_path) == []


def test_an_error_of_another_file_in_the_block_keeps_its_own_name(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        with output_file(tmp_path / "out.csv") as fh:
            fh.write("x")
            open(tmp_path / "missing-input.csv").close()
    assert err.value.filename == str(tmp_path / "missing-input.csv") and not (tmp_path / "out.csv").exists()


def test_an_unwritable_directory_names_the_output_not_the_temporary_file(tmp_path):
    if os.geteuid() == 0:
        target = "/proc/version"           # root writes anywhere; /proc refuses a new file to anyone
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        target = str(tmp_path / "ro" / "out.csv")
    with pytest.raises(OSError) as err:
        with output_file(target + ".new") as fh:
            fh.write("x")
    assert err.value.filename == target + ".new"


def test_a_pipe_is_written_in_place_and_a_link_is_followed(tmp_path):
    """A FIFO (as /dev/stdout or /dev/null would be) keeps being one and its reader gets the data."""
    fifo, got = tmp_path / "pipe", []
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    with output_file(fifo) as fh:
        fh.write("streamed")
    reader.join(timeout=30)
    assert got == ["streamed"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old\n")
    link.symlink_to(real)
    with output_file(link) as fh:
        fh.write("new\n")
    assert link.is_symlink() and real.read_text() == "new\n" and leftovers(tmp_path) == []


def test_a_line_appended_after_a_torn_one_stays_whole(tmp_path):
    """A sweep killed mid-line leaves a torn last line; the next run's line must not join it."""
    log = tmp_path / "results.jsonl"
    log.write_text('{"id": 1}\n{"id": 2, "err')
    append_line(log, '{"id": 3}\n')
    append_line(log, '{"id": 4}\n')
    assert log.read_text().splitlines() == ['{"id": 1}', '{"id": 2, "err', '{"id": 3}', '{"id": 4}']


def test_a_line_that_does_not_fit_is_cut_back_off_and_names_the_log(tmp_path):
    """Past the file-size limit (a full disk's stand-in) the log keeps exactly its earlier lines, so the line
    appended once there is room again starts a line of its own."""
    log = tmp_path / "results.jsonl"
    log.write_text('{"id": 1}\n' * 10)                    # 100 bytes
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from sim.output_file import append_line
        try:
            append_line({str(log)!r}, '{{"id": 11, "metrics": "' + 'x' * 60 + '"}}\\n')
        except OSError as exc:
            print(exc.errno, exc.filename)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=file_size_limit(120))
    assert done.stdout.split() == [str(errno.EFBIG), str(log)], done.stderr
    assert log.read_text() == '{"id": 1}\n' * 10
