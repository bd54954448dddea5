//! Extended attributes (`docs/pmfs-format.md` §5.1): the `user.` and `security.` names of an
//! inode live in one 4 KiB block that its inode points to (word `0x68`). A change writes a
//! whole new block into unreachable space and swaps the pointer in one journal transaction,
//! so a crash shows the old attributes or the new ones; the old block is freed after the
//! commit. Version-1 file systems (no such word) refuse attributes with `EOPNOTSUPP`.

use crate::batch::Batch;
use crate::error::{Corrupt, Errno};
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode, field};
use crate::layout::{BLOCK, get_u16, get_u32, put_u16, put_u32};
use crate::state::Inner;
use crate::tree;
use pmem::Persist;

/// Magic of an attribute block.
pub const MAGIC: [u8; 8] = *b"FXATTRS1";
/// Bytes of the block header: magic, count, bytes used, CRC-32.
pub const HEADER: usize = 16;
/// Longest attribute name.
pub const NAME_MAX: usize = 255;
/// Namespaces served (others: `EOPNOTSUPP`).
pub const NAMESPACES: [&[u8]; 2] = [b"user.", b"security."];

/// How `setxattr` treats an existing or missing name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    /// Create or replace.
    Any,
    /// Fail with `EEXIST` if the name exists (`XATTR_CREATE`).
    Create,
    /// Fail with `ENODATA` if the name is missing (`XATTR_REPLACE`).
    Replace,
}

/// The attributes of one inode, in the block's order.
type Attrs = Vec<(Vec<u8>, Vec<u8>)>;

fn entry_len(name: &[u8], value: &[u8]) -> usize {
    3 + name.len() + value.len()
}

/// The block holding `attrs` (which must fit).
pub fn encode(attrs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK as usize];
    b[..8].copy_from_slice(&MAGIC);
    let mut at = HEADER;
    for (name, value) in attrs {
        b[at] = name.len() as u8;
        put_u16(&mut b, at + 1, value.len() as u16);
        b[at + 3..at + 3 + name.len()].copy_from_slice(name);
        let v = at + 3 + name.len();
        b[v..v + value.len()].copy_from_slice(value);
        at = v + value.len();
    }
    put_u16(&mut b, 8, attrs.len() as u16);
    put_u16(&mut b, 10, (at - HEADER) as u16);
    let crc = crc(&b);
    put_u32(&mut b, 12, crc);
    b
}

/// CRC-32 of the block with its CRC field taken as zero.
fn crc(b: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&b[..12]);
    hasher.update(&[0; 4]);
    hasher.update(&b[HEADER..]);
    hasher.finalize()
}

/// The attributes in block `b` (of inode `ino`, for messages), every field checked.
pub fn decode(b: &[u8], ino: u64) -> Result<Attrs, Corrupt> {
    let fail = |what: &str| {
        Err(Corrupt::new(format!(
            "inode {ino}: attribute block: {what}"
        )))
    };
    if b[..8] != MAGIC {
        return fail("bad magic");
    }
    if get_u32(b, 12) != crc(b) {
        return fail("checksum mismatch");
    }
    let (count, used) = (get_u16(b, 8) as usize, get_u16(b, 10) as usize);
    if HEADER + used > b.len() {
        return fail("bad length");
    }
    let mut attrs = Vec::with_capacity(count);
    let mut at = HEADER;
    for _ in 0..count {
        if at + 3 > HEADER + used {
            return fail("entry past the end");
        }
        let (name_len, value_len) = (b[at] as usize, get_u16(b, at + 1) as usize);
        let end = at + 3 + name_len + value_len;
        if name_len == 0 || end > HEADER + used {
            return fail("entry past the end");
        }
        let name = b[at + 3..at + 3 + name_len].to_vec();
        attrs.push((name, b[at + 3 + name_len..end].to_vec()));
        at = end;
    }
    if at != HEADER + used {
        return fail("bytes past the last entry");
    }
    Ok(attrs)
}

/// Largest value `setxattr(2)` takes at all (Linux's `XATTR_SIZE_MAX`): a longer one is
/// `E2BIG`; one that does not fit the inode's attribute block is `ENOSPC`.
pub const VALUE_MAX: usize = 65_536;

/// Checks an attribute name: length, served namespace, a name after the prefix. As Linux:
/// an empty or overlong name is `ERANGE`, an unknown namespace `EOPNOTSUPP`, a bare prefix
/// (`user.`) `EINVAL`.
fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() || name.len() > NAME_MAX || name.contains(&0) {
        return Err(Errno::ERANGE);
    }
    match NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        None => Err(Errno::EOPNOTSUPP),
        Some(ns) if name.len() == ns.len() => Err(Errno::EINVAL),
        Some(_) => Ok(()),
    }
}

impl<B: Persist> Fs<B> {
    /// The attributes of `inode` (number `ino`).
    pub(crate) fn read_attrs(&self, ino: u64, inode: &Inode) -> Result<Attrs, Corrupt> {
        if inode.xattr == 0 {
            return Ok(Vec::new());
        }
        let mut b = vec![0u8; BLOCK as usize];
        self.pm().read(inode.xattr, &mut b);
        decode(&b, ino)
    }

    /// The value of attribute `name` of inode `ino` (`ENODATA` when it has none).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Errno> {
        let _inner = self.lock();
        let inode = self.inode(ino)?;
        check_name(name)?;
        let attrs = self.read_attrs(ino, &inode)?;
        attrs
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or(Errno::ENODATA)
    }

    /// The attribute names of inode `ino`.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, Errno> {
        let _inner = self.lock();
        let inode = self.inode(ino)?;
        Ok(self
            .read_attrs(ino, &inode)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// Sets attribute `name` of inode `ino` to `value`. All of an inode's names and values
    /// share one 4 KiB block (`ENOSPC` when they do not fit); a value over [`VALUE_MAX`]
    /// is `E2BIG`.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: SetMode,
    ) -> Result<(), Errno> {
        if value.len() > VALUE_MAX {
            return Err(Errno::E2BIG);
        }
        let mut inner = self.lock();
        let inode = self.attr_target(ino, name)?;
        let mut attrs = self.read_attrs(ino, &inode)?;
        match (attrs.iter().position(|(n, _)| n == name), mode) {
            (Some(_), SetMode::Create) => return Err(Errno::EEXIST),
            (None, SetMode::Replace) => return Err(Errno::ENODATA),
            (Some(i), _) => attrs[i].1 = value.to_vec(),
            (None, _) => attrs.push((name.to_vec(), value.to_vec())),
        }
        let used: usize = attrs.iter().map(|(n, v)| entry_len(n, v)).sum();
        if value.len() > usize::from(u16::MAX) || HEADER + used > BLOCK as usize {
            return Err(Errno::ENOSPC);
        }
        self.store_attrs(&mut inner, ino, inode, &attrs)?;
        self.pm().durability_point();
        Ok(())
    }

    /// Removes attribute `name` of inode `ino` (`ENODATA` when it has none).
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Errno> {
        let mut inner = self.lock();
        let inode = self.attr_target(ino, name)?;
        let mut attrs = self.read_attrs(ino, &inode)?;
        let i = attrs
            .iter()
            .position(|(n, _)| n == name)
            .ok_or(Errno::ENODATA)?;
        attrs.remove(i);
        self.store_attrs(&mut inner, ino, inode, &attrs)?;
        self.pm().durability_point();
        Ok(())
    }

    /// The inode whose attribute `name` is about to change, checked: a version-2 file
    /// system, a served namespace, and `user.` names only on files and directories (as
    /// Linux allows).
    fn attr_target(&self, ino: u64, name: &[u8]) -> Result<Inode, Errno> {
        let inode = self.inode(ino)?;
        if !self.sb.has_xattrs() {
            return Err(Errno::EOPNOTSUPP);
        }
        check_name(name)?;
        let plain = matches!(inode.kind(), Some(FileType::Regular | FileType::Directory));
        if name.starts_with(b"user.") && !plain {
            return Err(Errno::EPERM);
        }
        Ok(inode)
    }

    /// Writes `attrs` into a new block (none when empty) and swaps it in with the inode's
    /// `ctime`, one transaction; the old block is freed after the commit.
    fn store_attrs(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: Inode,
        attrs: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), Errno> {
        let sb = &self.sb;
        let mut batch = Batch::default();
        let new = if attrs.is_empty() {
            0
        } else {
            let block = inner.alloc_block(sb).ok_or(Errno::ENOSPC)?;
            batch.fresh(block, &encode(attrs));
            block
        };
        let mut updated = inode;
        updated.xattr = new;
        updated.ctime = self.now();
        batch.cold(sb, ino, &updated, field::XATTR, field::XATTR + 8);
        batch.hot(sb, ino, &updated);
        if let Err(e) = self.commit(inner, batch) {
            if new != 0 {
                inner.free_runs(sb, &[(new, 1)]);
            }
            return Err(e);
        }
        inner.add_blocks(ino, i64::from(new != 0) - i64::from(inode.xattr != 0));
        if inode.xattr != 0 {
            inner.free_runs(sb, &[(inode.xattr, 1)]);
        }
        Ok(())
    }

    /// Every block inode `inode` holds (its tree and its attribute block), as `(offset, 4 KiB
    /// blocks)` runs: what freeing it gives back.
    pub(crate) fn inode_blocks(&self, inode: &Inode) -> Result<Vec<(u64, u64)>, Corrupt> {
        let mut blocks = tree::blocks(self.pm(), &self.sb, inode.tree, inode.is_huge())?;
        if inode.xattr != 0 {
            blocks.push((inode.xattr, 1));
        }
        Ok(blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_damage_is_caught() {
        let attrs = vec![
            (b"user.a".to_vec(), b"1".to_vec()),
            (b"security.selinux".to_vec(), vec![7; 300]),
            (b"user.empty".to_vec(), Vec::new()),
        ];
        let block = encode(&attrs);
        assert_eq!(decode(&block, 1), Ok(attrs));
        for at in [0, 9, 12, 20, 400] {
            let mut bad = block.clone();
            bad[at] ^= 1;
            assert!(decode(&bad, 1).is_err(), "byte {at}");
        }
        assert_eq!(decode(&encode(&[]), 1), Ok(Vec::new()));
    }

    #[test]
    fn only_served_namespaces() {
        assert_eq!(check_name(b"user.x"), Ok(()));
        assert_eq!(check_name(b"security.capability"), Ok(()));
        assert_eq!(check_name(b"trusted.x"), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            check_name(b"user."),
            Err(Errno::EINVAL),
            "a bare prefix, as Linux"
        );
        assert_eq!(check_name(b""), Err(Errno::ERANGE));
    }
}
