/*
 * elf.c - does an ELF shared object define a function? The plugin checks plugstack.conf's lib=
 * this way, from the file's bytes: loading libtransit.so would run its constructors in srun.
 * Every offset and size is checked against the buffer, and structures are copied out with memcpy,
 * so any file (truncated, corrupt, hostile) is safe to look at.
 */
#include <elf.h>
#include <string.h>

#include "spank_transit.h"

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

/* True when [off, off + size) lies inside a buffer of len bytes. */
static bool inside(size_t len, uint64_t off, uint64_t size)
{
    return off <= len && size <= len - off;
}

static bool section(const unsigned char *buf, size_t len, const Elf64_Ehdr *eh, unsigned i, Elf64_Shdr *out)
{
    uint64_t off = eh->e_shoff + (uint64_t)i * sizeof(*out);
    if (i >= eh->e_shnum || !inside(len, off, sizeof(*out)))
        return false;
    memcpy(out, buf + off, sizeof(*out));
    return true;
}

int transit_elf_defines(const unsigned char *buf, size_t len, const char *sym)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, strtab;
    size_t symlen = strlen(sym);

    if (len < sizeof(eh))
        return -1;
    memcpy(&eh, buf, sizeof(eh));
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != NATIVE_DATA || eh.e_type != ET_DYN || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff > len)
        return -1;
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        if (!section(buf, len, &eh, i, &sh))
            return -1;
        if (sh.sh_type != SHT_DYNSYM)
            continue;
        if (sh.sh_entsize != sizeof(Elf64_Sym) || !inside(len, sh.sh_offset, sh.sh_size) ||
            !section(buf, len, &eh, sh.sh_link, &strtab) || strtab.sh_type != SHT_STRTAB ||
            !inside(len, strtab.sh_offset, strtab.sh_size))
            return -1;
        const char *names = (const char *)buf + strtab.sh_offset;
        for (uint64_t s = 0; s + sizeof(Elf64_Sym) <= sh.sh_size; s += sizeof(Elf64_Sym)) {
            Elf64_Sym es;
            memcpy(&es, buf + sh.sh_offset + s, sizeof(es));
            /* the name and its terminating NUL must lie inside the string table */
            if (es.st_name >= strtab.sh_size || strtab.sh_size - es.st_name <= symlen)
                continue;
            if (memcmp(names + es.st_name, sym, symlen + 1) == 0 && es.st_shndx != SHN_UNDEF &&
                ELF64_ST_TYPE(es.st_info) == STT_FUNC &&
                (ELF64_ST_BIND(es.st_info) == STB_GLOBAL || ELF64_ST_BIND(es.st_info) == STB_WEAK))
                return 1;
        }
        return 0;
    }
    return 0;
}
