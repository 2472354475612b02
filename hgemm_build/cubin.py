"""What a cubin exports for the build, read from its ELF symbol table in pure Python (no cuobjdump).

Each kernel family exports its kernels' dynamic shared memory as `hg_dsmem__<symbol>` (a 4-byte
`__constant__ int`, cu/common/dsmem.cuh); the build holds those values against the `dsmem` its toml
declares, so the size the runtime asks for and the size the kernel carves up cannot drift apart.
"""
from __future__ import annotations

import struct

DSMEM_PREFIX = "hg_dsmem__"

_SHT_SYMTAB = 2
_SHT_NOBITS = 8
_SHN_LORESERVE = 0xFF00  # section indices from here on are special (absolute, common, ...)


class CubinError(ValueError):
    """The file is not a 64-bit little-endian ELF, or an export is not readable 4-byte data."""


def int32_exports(data: bytes, prefix: str, what: str = "cubin") -> dict[str, int]:
    """{name without prefix: value} of every 4-byte data symbol whose name starts with `prefix`."""
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise CubinError(f"{what} is not a 64-bit little-endian ELF file (a cubin)")
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    except struct.error:
        raise CubinError(f"{what}: truncated ELF section table") from None
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
