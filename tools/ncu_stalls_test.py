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
    check_roles()
    print("ok")


# A warp-specialised kernel: entry code, the consumers' stretch (it issues wgmma), the producer warpgroup's.
ROLES_PAGE = """\
"Kernel Name","void kernel(Params)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_barrier","stall_selected"
"0x10","S2R R0, SR_TID.X","4","0","0","0","4"
"0x20","SETMAXREG.TRY_ALLOC.CTAPOOL R1, 0xd0","6","0","0","0","6"
"0x30","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR12], R24","30","0","0","30","0"
"0x40","@P0   BRA 0x30","60","0","60","0","0"
"0x50","SETMAXREG.DEALLOC 0x58","10","0","0","0","10"
"0x60","MUFU.RCP R3, R4","90","0","0","0","90"
"0x70","UTMALDG.2D [UR8], [UR4]","0","0","0","0","0"
"""


def check_roles():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "roles.csv"
        path.write_text(ROLES_PAGE)
        instructions = ncu_stalls.read_source_page(path)
    stretches = ncu_stalls.role_stretches(instructions)
    assert [(role, len(stretch)) for role, stretch in stretches] == [
        ("before the split", 1), ("consumers", 3), ("producer warpgroup", 3)], stretches
    lines = ncu_stalls.summarise_roles(instructions)
    assert lines == [
        "before the split: 4 samples (2%); selected 100%",
        "consumers: 96 samples (48%); long_sb 62%, barrier 31%, selected 6%",
        "producer warpgroup: 100 samples (50%); selected 100%",
    ], lines


if __name__ == "__main__":
    main()
