"""Output files are written whole or not at all (sim.output_file): a write that fails part-way leaves no
truncated file and keeps the earlier one, its error names the output, and devices and links are honoured; a file
read while it is written (a live recording) appears with its start already in it."""
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

from sim.output_file import append_line, create_with_start, output_file


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".partial-" in p.name)


def error_past_size_limit(code: str, limit: int) -> list[str]:
    """The errno and file name of the OSError that ``code`` (lines using ``sim.output_file``) raises in a child
    process whose files may grow to ``limit`` bytes only: a write past it fails with EFBIG and no file name, as a
    full disk's does with ENOSPC."""
    script = "\n".join(["import sys", f"sys.path.insert(0, {os.getcwd()!r})", "from sim.output_file import *",
                        "try:", textwrap.indent(textwrap.dedent(code).strip(), "    "),
                        "except OSError as exc:", "    print(exc.errno, exc.filename)"])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          preexec_fn=file_size_limit(limit))
    assert not done.stderr, done.stderr
    return done.stdout.split()


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
    assert error_past_size_limit(f"""
        with output_file({str(path)!r}) as fh:
            for _ in range(1000):
                fh.write("0.004\\t" * 20 + "\\n")
        """, 4096) == [str(errno.EFBIG), str(path)]
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
    line = '{"id": 11, "metrics": "' + "x" * 60 + '"}\n'
    assert error_past_size_limit(f"append_line({str(log)!r}, {line!r})", 120) == [str(errno.EFBIG), str(log)]
    assert log.read_text() == '{"id": 1}\n' * 10


def test_a_file_appears_under_its_name_with_its_start_already_in_it(tmp_path):
    """A reader polling for a live recording opens it the moment its name exists: the start (the header, here
    32 MiB so that writing it takes long against one poll) must all be there by then."""
    path, size, seen = tmp_path / "run.hilrec", 32 << 20, []
    start = b"H" * size
    writer = threading.Thread(target=lambda: create_with_start(path, start).close(), daemon=True)
    writer.start()
    while writer.is_alive() or not seen:
        try:
            with open(path, "rb") as fh:
                seen.append(os.fstat(fh.fileno()).st_size)
        except FileNotFoundError:
            continue
    writer.join()
    assert seen[0] == size, f"the name appeared with {seen[0]} of the start's {size} bytes"
    assert path.stat().st_size == size and leftovers(tmp_path) == []


def test_an_existing_name_is_refused_and_kept(tmp_path):
    path = tmp_path / "run.hilrec"
    path.write_bytes(b"an earlier run")
    with pytest.raises(FileExistsError) as err:
        create_with_start(path, b"header")
    assert err.value.filename == str(path) and path.read_bytes() == b"an earlier run" and leftovers(tmp_path) == []


def test_the_file_is_appended_after_its_start(tmp_path):
    path = tmp_path / "run.hilrec"
    with create_with_start(path, b"header|") as fh:
        fh.write(b"block")
    assert path.read_bytes() == b"header|block"


def test_without_hard_links_the_file_is_created_in_place(tmp_path, monkeypatch):
    """vfat and some network mounts answer link() with EPERM; the file is then made as open(path, "xb") would."""
    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted", str(src), None, str(dst))
    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "run.hilrec"
    with create_with_start(path, b"header|") as fh:
        fh.write(b"block")
    assert path.read_bytes() == b"header|block" and leftovers(tmp_path) == []
    with pytest.raises(FileExistsError):
        create_with_start(path, b"header|")


def test_a_start_that_does_not_fit_names_the_file_and_leaves_nothing(tmp_path):
    path = tmp_path / "run.hilrec"
    assert error_past_size_limit(f"create_with_start({str(path)!r}, b'H' * 8192)", 4096) == [str(errno.EFBIG),
                                                                                               str(path)]
    assert not path.exists() and leftovers(tmp_path) == []
