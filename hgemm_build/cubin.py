"""What a cubin exports for the build, read from its ELF symbol table, and which CUDA toolkit wrote it, read
from its ELF header: in pure Python (no cuobjdump).

Each kernel family exports its kernels' dynamic shared memory as `hg_dsmem__<symbol>` (a 4-byte
`__constant__ int`, cu/common/dsmem.cuh); the build holds those values against the `dsmem` its toml
declares, so the size the runtime asks for and the size the kernel carves up cannot drift apart.
"""
from __future__ import annotations

import re
import struct

DSMEM_PREFIX = "hg_dsmem__"

_SHT_SYMTAB = 2
_SHT_NOTE = 7
_SHT_NOBITS = 8
_SHN_LORESERVE = 0xFF00  # section indices from here on are special (absolute, common, ...)

# The two CUDA ELF ABIs (e_ident[EI_OSABI], e_ident[EI_ABIVERSION]): the one of CUDA 12 and before, whose
# e_version holds the toolkit (0x81 = 129 = CUDA 12.9, as `cuobjdump -elf` prints it), and the one CUDA 13
# introduced, whose e_version is 1 and whose .note.nv.tkinfo names the ptxas release.
ABI_CUDA_12 = (0x33, 7)
ABI_CUDA_13 = (0x41, 8)
_TKINFO_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+)")


class CubinError(ValueError):
    """The file is not a 64-bit little-endian ELF, or an export is not readable 4-byte data."""


def _sections(data: bytes, what: str) -> list[tuple]:
    """The ELF section headers (name, type, flags, addr, offset, size, link, info, align, entsize)."""
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise CubinError(f"{what} is not a 64-bit little-endian ELF file (a cubin)")
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        return [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    except struct.error:
        raise CubinError(f"{what}: truncated ELF section table") from None


def toolkit_version(data: bytes, what: str = "cubin") -> tuple[int, int]:
    """(major, minor) of the CUDA toolkit whose ptxas wrote the cubin: from the ELF header in the CUDA 12
    ABI, from the .note.nv.tkinfo note in the CUDA 13 one."""
    sections = _sections(data, what)
    abi = (data[7], data[8])
    if abi == ABI_CUDA_12:
        e_version, = struct.unpack_from("<I", data, 0x14)
        return divmod(e_version, 10)
    if abi != ABI_CUDA_13:
        raise CubinError(f"{what}: unknown CUDA ELF ABI (EI_OSABI {abi[0]:#x}, EI_ABIVERSION {abi[1]})")
    for _name, sh_type, _flags, _addr, offset, size, *_ in sections:
        m = _TKINFO_RELEASE.search(data[offset:offset + size]) if sh_type == _SHT_NOTE else None
        if m:
            return int(m.group(1)), int(m.group(2))
    raise CubinError(f"{what}: a CUDA 13 ELF without the toolkit note (.note.nv.tkinfo)")


def int32_exports(data: bytes, prefix: str, what: str = "cubin") -> dict[str, int]:
    """{name without prefix: value} of every 4-byte data symbol whose name starts with `prefix`."""
    sections = _sections(data, what)
    out: dict[str, int] = {}
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != _SHT_SYMTAB:
            continue
        strtab = sections[link]
        strings = data[strtab[4]:strtab[4] + strtab[5]]
        for pos in range(offset, offset + size, entsize or 24):
            st_name, _st_info, _other, shndx, value, st_size = struct.unpack_from("<IBBHQQ", data, pos)
            name = strings[st_name:strings.index(b"\0", st_name)].decode()
            if not name.startswith(prefix):
                continue
            if st_size != 4 or shndx == 0 or shndx >= min(_SHN_LORESERVE, len(sections)) \
                    or sections[shndx][1] == _SHT_NOBITS:
                raise CubinError(f"{what}: {name} is not a 4-byte initialised constant (size {st_size}, "
                                 f"section {shndx}); export it with HG_EXPORT_DSMEM (cu/common/dsmem.cuh)")
            start = sections[shndx][4] + value
            out[name[len(prefix):]] = int.from_bytes(data[start:start + 4], "little", signed=True)
    return out


def dsmem_exports(data: bytes, what: str = "cubin") -> dict[str, int]:
    """{kernel symbol: dynamic shared-memory bytes} as the family's source computes them."""
    return int32_exports(data, DSMEM_PREFIX, what)
