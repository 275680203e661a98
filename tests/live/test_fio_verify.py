"""fio --verify through the loop device of an emulated disk, and proof the check can fail:
the same job over a target that corrupts one block on read is caught by fio's crc32c."""

from __future__ import annotations

import pytest

from raidlab.errors import ToolFailedError
from raidlab.export import BlockExportFS, ImageFileTarget, attach_loop, create_sparse_image
from raidlab.export import mount_export
from raidlab.export.background import lab_in_background, serve_in_background
from raidlab.export.serve import ServeRequest
from raidlab.tools import fio

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20


def _verify_job(device: str) -> fio.FioJob:
    return fio.FioJob(name="verify", filename=device, rw="randwrite", bs="4k", size="8m",
                      iodepth=16, verify="crc32c", seed=42)


def test_fio_verify_through_an_emulated_disk(tmp_path):
    req = ServeRequest(disks=2, model="none", size=32 * MiB, name="fio", home=str(tmp_path))
    with serve_in_background(req) as lab:
        d1 = lab.disks[1]
        run = fio.run_job(_verify_job(d1.device))
        [job] = run.jobs
        assert run.ok and job.error == 0
        assert job.write.ios == 2048                 # 8 MiB of 4 KiB writes
        assert job.read.ios == job.write.ios         # every block read back and checked
        disk = lab.call(d1.target.statistics)
        assert disk["bytes_written"] >= 8 * MiB and disk["bytes_read"] >= 8 * MiB
        assert lab.call(lab.disks[0].target.statistics)["bytes_written"] == 0
        lab_dir = lab.session.lab.path
    assert leftovers(lab_dir, "fio") == {}


class CorruptingTarget(ImageFileTarget):
    """Flips one bit in every read of one 4 KiB block: a planted data-path bug."""

    BAD_BLOCK = 1 * MiB

    async def read(self, offset, length):
        data = await super().read(offset, length)
        if offset <= self.BAD_BLOCK < offset + length:
            pos = self.BAD_BLOCK - offset + 100
            data = data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1:]
        return data


def test_fio_verify_catches_a_corrupting_target(tmp_path):
    image = create_sparse_image(tmp_path / "bad.img", 16 * MiB)

    async def setup(session):
        fs = BlockExportFS()
        target = CorruptingTarget("bad", image)
        session.push_sync("corrupting target", target.close)
        fs.add("bad", target)
        export = await mount_export(session, fs)
        return await attach_loop(session, export, "bad")

    with lab_in_background("bad", setup, home=str(tmp_path)) as lab:
        with pytest.raises(ToolFailedError) as info:
            fio.run_job(_verify_job(lab.value.device))
        assert "verify" in info.value.fields["stderr"]
        lab_dir = lab.session.lab.path
    assert leftovers(lab_dir, "bad") == {}
