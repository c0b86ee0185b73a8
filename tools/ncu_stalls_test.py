#!/usr/bin/env python3
"""tools/ncu_stalls.py on a made-up source page: the samples' total and reasons, the instructions in order of their
samples, and the barrier a waiting branch loops on."""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ncu_stalls  # noqa: E402

PAGE = """\
"Kernel Name","void kernel(Params)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_barrier","stall_wait","stall_long_sb (Not Issued)"
"0x10","ULEA UR4, UR5, UR7, 0x3","10","9","0","0","10","0"
"0x20","SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x34400], R17","20","18","0","0","20","0"
"0x30","@P0   BRA 0x60","600","590","600","0","0","590"
"0x40","WARPGROUP.DEPBAR.LE gsb0, 0x1","300","290","0","300","0","0"
"0x50","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR12], R24","70","60","0","0","70","0"
"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "source.csv"
        path.write_text(PAGE)
        instructions = ncu_stalls.read_source_page(path)
        assert [i[2] for i in instructions] == [10, 20, 600, 300, 70], instructions
        lines = ncu_stalls.summarise(instructions, top=3)
    assert lines[0] == "1000 samples over 5 instructions", lines[0]
    assert lines[1] == "stall reasons: long_sb 60.0%, barrier 30.0%, wait 10.0%", lines[1]
    assert "@P0   BRA 0x60" in lines[3] and lines[3].strip().startswith("60.0%"), lines[3]
    assert lines[4].strip() == "loops on: SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x34400], R17", lines[4]
    assert "WARPGROUP.DEPBAR" in lines[5] and "HGMMA" in lines[6], lines[5:]
    assert len(lines) == 7, lines
    print("ok")


if __name__ == "__main__":
    main()
