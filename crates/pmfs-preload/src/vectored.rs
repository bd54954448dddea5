//! Vectored I/O on served descriptors (`readv`, `writev`, `preadv`, `pwritev` and their
//! `64` forms): the buffers are gathered into one served write, or one served read is
//! scattered over them, so a vectored call is one library call as it is one system call.

use crate::abi::{offset, served_fd, size_ret};
use libc::{c_int, iovec, off_t, ssize_t};
use pmfs::Errno;

/// The buffers of `iov`.
///
/// # Safety
/// `iov` points to `count` `iovec`s, each naming `iov_len` bytes (or is unused when
/// `count` is 0).
unsafe fn buffers<'a>(iov: *const iovec, count: c_int) -> Result<&'a [iovec], Errno> {
    let count = usize::try_from(count).map_err(|_| Errno::EINVAL)?;
    if count > libc::UIO_MAXIOV as usize {
        return Err(Errno::EINVAL);
    }
    if count == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's array of `count` `iovec`s.
    Ok(unsafe { std::slice::from_raw_parts(iov, count) })
}

/// The bytes of all buffers, in order.
///
/// # Safety
/// Each `iovec` names `iov_len` readable bytes.
unsafe fn gather(iov: &[iovec]) -> Vec<u8> {
    let mut data = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum());
    for v in iov.iter().filter(|v| v.iov_len > 0) {
        // SAFETY: the caller's buffer of `iov_len` bytes.
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base.cast(), v.iov_len) });
    }
    data
}

/// Copies `data` over the buffers in order.
///
/// # Safety
/// Each `iovec` names `iov_len` writable bytes.
unsafe fn scatter(iov: &[iovec], mut data: &[u8]) {
    for v in iov {
        let n = v.iov_len.min(data.len());
        // SAFETY: the caller's buffer of at least `n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), v.iov_base.cast(), n) };
        data = &data[n..];
    }
}

/// Writes the buffers of `iov` at `at` (`None`: at the descriptor's position).
///
/// # Safety
/// As `writev`.
unsafe fn write_served(kfd: c_int, iov: *const iovec, count: c_int, at: Option<off_t>) -> ssize_t {
    let Some((fs, open)) = served_fd(kfd) else {
        return size_ret(Err(Errno::EBADF));
    };
    // SAFETY: the caller's `iovec`s.
    let result = unsafe { buffers(iov, count) }.and_then(|iov| {
        // SAFETY: as above.
        let data = unsafe { gather(iov) };
        match at {
            None => fs.px.write(open.fd, &data),
            Some(off) => fs.px.pwrite(open.fd, &data, offset(off)?),
        }
    });
    size_ret(result)
}

/// Reads into the buffers of `iov` from `at` (`None`: from the descriptor's position).
///
/// # Safety
/// As `readv`.
unsafe fn read_served(kfd: c_int, iov: *const iovec, count: c_int, at: Option<off_t>) -> ssize_t {
    let Some((fs, open)) = served_fd(kfd) else {
        return size_ret(Err(Errno::EBADF));
    };
    // SAFETY: the caller's `iovec`s.
    let result = unsafe { buffers(iov, count) }.and_then(|iov| {
        let mut data = vec![0u8; iov.iter().map(|v| v.iov_len).sum()];
        let n = match at {
            None => fs.px.read(open.fd, &mut data)?,
            Some(off) => fs.px.pread(open.fd, &mut data, offset(off)?)?,
        };
        // SAFETY: as above.
        unsafe { scatter(iov, &data[..n]) };
        Ok(n)
    });
    size_ret(result)
}

/// Defines vectored call `$name`, served by `$served` with the offset `$at` makes of its
/// arguments.
macro_rules! vectored {
    ($name:ident, $served:ident, ($($arg:ident: $ty:ty),*), $at:expr) => {
        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            kfd: c_int,
            iov: *const iovec,
            count: c_int
            $(, $arg: $ty)*
        ) -> ssize_t {
            if served_fd(kfd).is_some() {
                // SAFETY: the call's arguments, as received.
                return unsafe { $served(kfd, iov, count, $at) };
            }
            let real = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, *const iovec, c_int $(, $ty)*) -> ssize_t
            );
            // SAFETY: forwarded as received.
            unsafe { real(kfd, iov, count $(, $arg)*) }
        }
    };
}

vectored!(writev, write_served, (), None);
vectored!(readv, read_served, (), None);
vectored!(pwritev, write_served, (off: off_t), Some(off));
vectored!(preadv, read_served, (off: off_t), Some(off));
vectored!(pwritev64, write_served, (off: off_t), Some(off));
vectored!(preadv64, read_served, (off: off_t), Some(off));
