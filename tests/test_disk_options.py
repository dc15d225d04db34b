"""Given an admin's disk options on the command line, expect them to reach the service as
bytes and seconds (or off), and a size or duration that means nothing to be refused with the
forms that work."""

from __future__ import annotations

import pytest

from labhive.scheduler.cli import build_parser
from labhive.scheduler.core.sizes import MIB, parse_size, show_size
from labhive.scheduler.service.commands import _options


def serve_options(*args: str):
    return _options(build_parser().parse_args(["serve", *args]))


def test_the_defaults_cap_output_at_100_mib_hold_work_dirs_to_10_gib_and_keep_them_a_week():
    opts = serve_options()
    assert (opts.output_cap, opts.output_cap_kills) == (100 * MIB, False)
    assert opts.work_quota == 10 * 1024 * MIB
    assert opts.disk_reserve == -1  # 200 MiB or 1% of the file system, the smaller
    assert opts.keep_work_s == 7 * 86400


def test_each_can_be_set_or_turned_off():
    opts = serve_options(
        "--output-cap", "off", "--output-cap-kills", "--work-quota", "512k",
        "--disk-reserve", "1G", "--keep-work", "forever",
    )  # fmt: skip
    assert (opts.output_cap, opts.output_cap_kills, opts.work_quota) == (None, True, 512 * 1024)
    assert (opts.disk_reserve, opts.keep_work_s) == (1024 * MIB, None)
    assert serve_options("--keep-work", "12h").keep_work_s == 12 * 3600


@pytest.mark.parametrize("bad", ["", "-5M", "1.5.2G", "10 parsecs", "0.0001"])
def test_a_size_that_means_nothing_is_refused_with_the_forms_that_work(bad):
    with pytest.raises(ValueError, match=r'a size like "100M", "10G", "512k"'):
        parse_size(bad)


def test_sizes_read_and_show_in_binary_units():
    assert [parse_size(t) for t in ("100M", "10G", "512k", "1MiB", "2048", "off")] == [
        100 * MIB, 10 * 1024 * MIB, 512 * 1024, MIB, 2048, None,
    ]  # fmt: skip
    assert [show_size(n) for n in (100 * MIB, 10 * 1024 * MIB, 1536, 37, 3 * MIB // 2)] == [
        "100 MiB", "10 GiB", "1536 bytes", "37 bytes", "1.5 MiB",
    ]  # fmt: skip
