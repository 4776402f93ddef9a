//! The view: the command's private root, built from the plan's mount list inside the run's
//! own mount namespace (DESIGN.md, "Enforcement layers", item 1).
//!
//! Two halves, split by the fork:
//!
//! * [`prepare`] runs in the parent before the fork. It checks the list, converts every
//!   path to a `CString` and sizes every buffer `apply` will need; it may allocate, and it
//!   opens nothing.
//! * [`PreparedView::apply`] runs in the child after the fork, as PID 1 of the run's PID
//!   namespace, inside its own mount namespace (and user namespace when not root), with
//!   full capabilities there. It is async-signal-safe: raw syscalls through `libc`, no
//!   heap (its buffers were sized by `prepare` and are the child's own copy after the
//!   fork), no locks. The number of mounts is not limited by fixed-size arrays.
//!
//! What `apply` does, in order:
//!
//! 1. Makes every mount private (`MS_REC|MS_PRIVATE`), so nothing propagates to the host.
//! 2. Pins the host sources that the new root will cover: those beneath the staging
//!    directory [`STAGING`] (`/tmp`: the scratch dir, a workspace there), or above it.
//!    Each is cloned with `open_tree(OPEN_TREE_CLONE|AT_RECURSIVE|AT_SYMLINK_NOFOLLOW)`
//!    by name relative to its parent directory, which was opened with
//!    `openat2(RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)`: no symlink is followed on the
//!    way, and a symlink swapped in for the source after `plan` is refused (`ELOOP`).
//!    The rule's reductions (nosuid, nodev unless a device, rdonly, noexec) are applied
//!    to the detached clone in the same call (`open_tree_attr`, Linux 6.15; older
//!    kernels: `mount_setattr` after `open_tree`), and the clone's `(dev, ino)` is
//!    compared with the plan's. These few are held open until they are mounted.
//! 3. Mounts the new root, a small tmpfs, over the staging directory. `/tmp` exists on
//!    every Linux host and container. Covering it happens only inside the run's private
//!    mount namespace, never on the host, and since every source beneath it was already
//!    cloned in step 2, they are unaffected. Nothing is created or written on the host.
//! 4. Carries out the list, in order. Every other source is pinned, checked and cloned
//!    exactly as in step 2, just before it is mounted, and closed right after: none of our
//!    mounts (all beneath the staging dir) can hide or change it, and thousands of binds
//!    never hold thousands of descriptors. A source is opened relative to its parent
//!    directory, itself opened without symlinks and kept for its next sibling.
//!    Mountpoints are found beneath the new root one component at a time with
//!    `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`, so a symlink planted by a host
//!    process inside an earlier read-write bind is never followed; the directory holding
//!    the last mountpoint is kept for the next one until a mount covers it. A missing
//!    mountpoint is created only on a tmpfs of our own (the new root, a mask, `/dev`),
//!    never inside a host bind (that is refused with `ENOENT`). Mounts are attached with
//!    `move_mount(MOVE_MOUNT_T_EMPTY_PATH)` onto the opened mountpoint, or, where the
//!    mountpoint was just created on our own tmpfs, by its name relative to the kept
//!    directory (no symlink followed). A mask is made read-only as soon as the last mount
//!    inside it (a carve-out) is in place. Where the plan has a Landlock rule at exactly a
//!    bind's target and no later mount hides that bind ([`PreparedView::adopt_landlock`]),
//!    the rule is added right after the attach, on the mount's own descriptor: its root is
//!    the inode the command reaches at that path once the view is final, which is where
//!    a rule added by opening the path then would bind too, and the path is not opened a
//!    second time. The ruleset is only enforced later, by the command, as before.
//! 5. Makes `/dev`'s tmpfs and the new root itself read-only, removes the empty file used
//!    for file masks, `pivot_root(".", ".")` into the new root, detaches the old root
//!    (`umount2(MNT_DETACH)`) and `chdir("/")`. Every descriptor it opened is closed on
//!    return, on success and on error.

use super::landlock::PreparedLandlock;
use crate::plan::FastMap;
use crate::plan::Mount;
use anyhow::{bail, Context as _};
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// `StepError::index` for a step that belongs to no single mount of the list.
pub const NO_INDEX: usize = usize::MAX;

/// The host directory the new root is mounted over, inside the private mount namespace.
/// Sources at or beneath it (or above it) are cloned before it is covered; this compares
/// paths, so it assumes `/tmp` is a directory, not a symlink to one (a source then
/// covered fails closed: `open source` or `source changed since plan`).
pub const STAGING: &CStr = c"/tmp";

/// The empty file bound over denied files; created in the new root, removed at the end.
const EMPTY_FILE: &CStr = c".cordon-empty";

/// Host device nodes bound into the minimal `/dev`; a missing one is skipped.
const DEV_NODES: [(&CStr, &CStr); 6] = [
    (c"/dev/null", c"null"),
    (c"/dev/zero", c"zero"),
    (c"/dev/full", c"full"),
    (c"/dev/random", c"random"),
    (c"/dev/urandom", c"urandom"),
    (c"/dev/tty", c"tty"),
];

/// Symlinks created in the minimal `/dev`: (name, points to).
const DEV_LINKS: [(&CStr, &CStr); 5] = [
    (c"ptmx", c"pts/ptmx"),
    (c"fd", c"/proc/self/fd"),
    (c"stdin", c"/proc/self/fd/0"),
    (c"stdout", c"/proc/self/fd/1"),
    (c"stderr", c"/proc/self/fd/2"),
];

// include/uapi/linux/mount.h; libc does not export these for every target.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
/// `open_tree_attr` (Linux 6.15); the same number on every architecture.
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;
// include/uapi/linux/openat2.h
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Which step of building the view failed, with the `errno` and the index in the mount
/// list (or [`NO_INDEX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepError {
    pub step: &'static str,
    pub errno: i32,
    pub index: usize,
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let err = std::io::Error::from_raw_os_error(self.errno);
        if self.index == NO_INDEX {
            write!(f, "view: {}: {err}", self.step)
        } else {
            write!(f, "view: mount #{}: {}: {err}", self.index, self.step)
        }
    }
}

impl std::error::Error for StepError {}

/// A failed step not yet tied to a mount index.
type Step<T> = Result<T, (&'static str, i32)>;

fn at(index: usize) -> impl Fn((&'static str, i32)) -> StepError {
    move |(step, errno)| StepError { step, errno, index }
}

/// Everything the view needs, converted and sized before fork: `apply` does not allocate.
#[derive(Debug)]
pub struct PreparedView {
    ops: Vec<Op>,
    /// One slot per op for a descriptor `apply` holds across ops: the early clone of a
    /// bind's source (step 2), or a mask's tmpfs until it is sealed. `-1`: none. Cells,
    /// because `apply` takes `&self`: it runs in the forked child, on its own copy.
    held: Vec<Cell<i32>>,
    /// `(after op, mask op)`, ordered by the first: each mask is made read-only right
    /// after the last op that mounts inside it (or its own, when none does).
    seals: Vec<(usize, usize)>,
    /// Room for the device numbers of cordon's own tmpfs mounts that can still get
    /// mountpoints: the new root, `/dev`, and the masks not yet sealed.
    owned: Vec<Cell<u64>>,
    /// How many sources step 2 holds open at once.
    early: usize,
}

/// One mount, ready for `apply`. Targets are relative to the new root (no leading `/`).
#[derive(Debug)]
enum Op {
    Bind {
        source: CString,
        target: CString,
        is_dir: bool,
        attr: u64,
        dev_ino: (u64, u64),
        /// Beneath the staging dir or above it: cloned before the new root covers it.
        early: bool,
        /// Landlock rights the view adds on the attached mount itself (see
        /// [`PreparedView::adopt_landlock`]); 0: none.
        landlock: u64,
    },
    MaskDir {
        target: CString,
    },
    MaskFile {
        target: CString,
    },
    Proc {
        target: CString,
    },
    Dev {
        target: CString,
    },
    Symlink {
        target: CString,
        link: CString,
    },
}

impl Op {
    fn target(&self) -> &CStr {
        match self {
            Op::Bind { target, .. }
            | Op::MaskDir { target }
            | Op::MaskFile { target }
            | Op::Proc { target }
            | Op::Dev { target }
            | Op::Symlink { target, .. } => target,
        }
    }
}

/// Check the plan's mount list and convert it for [`PreparedView::apply`]. Runs before the
/// fork; it allocates but opens nothing.
pub fn prepare(mounts: &[Mount]) -> anyhow::Result<PreparedView> {
    let mut dev_seen = false;
    let mut ops = Vec::with_capacity(mounts.len());
    let staging = Path::new(std::ffi::OsStr::from_bytes(STAGING.to_bytes()));
    for (i, m) in mounts.iter().enumerate() {
        let op = match m {
            Mount::Bind {
                source,
                target,
                is_dir,
                read_only,
                exec,
                device,
                dev_ino,
            } => {
                let mut attr = MOUNT_ATTR_NOSUID;
                if !device {
                    attr |= MOUNT_ATTR_NODEV;
                }
                if *read_only {
                    attr |= MOUNT_ATTR_RDONLY;
                }
                if !exec {
                    attr |= MOUNT_ATTR_NOEXEC;
                }
                Op::Bind {
                    source: absolute(source).with_context(|| format!("view mount #{i}"))?,
                    target: relative(target).with_context(|| format!("view mount #{i}"))?,
                    is_dir: *is_dir,
                    attr,
                    dev_ino: *dev_ino,
                    early: crate::plan::beneath(source, staging)
                        || crate::plan::beneath(staging, source),
                    landlock: 0,
                }
            }
            Mount::MaskDir { target } => Op::MaskDir {
                target: relative(target).with_context(|| format!("view mount #{i}"))?,
            },
            Mount::MaskFile { target } => Op::MaskFile {
                target: relative(target).with_context(|| format!("view mount #{i}"))?,
            },
            Mount::Proc { target } => Op::Proc {
                target: relative(target).with_context(|| format!("view mount #{i}"))?,
            },
            Mount::Dev { target } => {
                if dev_seen {
                    bail!("view mount #{i}: a second minimal /dev");
                }
                dev_seen = true;
                Op::Dev {
                    target: relative(target).with_context(|| format!("view mount #{i}"))?,
                }
            }
            Mount::Symlink { target, link } => {
                if link.as_os_str().is_empty() {
                    bail!("view mount #{i}: empty symlink {}", target.display());
                }
                Op::Symlink {
                    target: relative(target).with_context(|| format!("view mount #{i}"))?,
                    link: CString::new(link.as_os_str().as_bytes())
                        .with_context(|| format!("view mount #{i}: NUL in symlink"))?,
                }
            }
        };
        ops.push(op);
    }
    let seals = seal_points(&ops);
    let early = ops
        .iter()
        .filter(|op| matches!(op, Op::Bind { early: true, .. }))
        .count();
    Ok(PreparedView {
        held: (0..ops.len()).map(|_| Cell::new(-1)).collect(),
        owned: (0..seals.len() + 2).map(|_| Cell::new(0)).collect(),
        seals,
        early,
        ops,
    })
}

/// For each mask, the last op whose target lies beneath it (the mask itself when none
/// does): `(after op, mask op)`, ordered. Found by looking each target's ancestors up in
/// a map of the masks, so thousands of mounts cost thousands of lookups.
fn seal_points(ops: &[Op]) -> Vec<(usize, usize)> {
    let masks: FastMap<&[u8], usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op, Op::MaskDir { .. }))
        .map(|(i, op)| (op.target().to_bytes(), i))
        .collect();
    let mut after: FastMap<usize, usize> = masks.values().map(|&m| (m, m)).collect();
    if !masks.is_empty() {
        for (j, op) in ops.iter().enumerate() {
            let mut t = op.target().to_bytes();
            while let Some(cut) = t.iter().rposition(|c| *c == b'/') {
                t = &t[..cut];
                if let Some(m) = masks.get(t) {
                    let last = after.get_mut(m).expect("every mask has an entry");
                    *last = (*last).max(j);
                }
            }
        }
    }
    let mut seals: Vec<(usize, usize)> = after.into_iter().map(|(m, j)| (j, m)).collect();
    seals.sort_unstable();
    seals
}

/// An absolute path other than `/` with no empty, `.` or `..` component: what the plan
/// gives for every mount. Checked by bytes, for thousands of mounts.
fn plainly_normal(b: &[u8]) -> bool {
    b.len() > 1
        && b[0] == b'/'
        && b[1..]
            .split(|c| *c == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// A normalized absolute host path as a C string.
fn absolute(path: &Path) -> anyhow::Result<CString> {
    let b = path.as_os_str().as_bytes();
    if plainly_normal(b) {
        return CString::new(b).context("NUL in a path");
    }
    if !path.is_absolute() || path.components().any(|c| !normal_or_root(c)) {
        bail!(
            "source `{}` is not a normalized absolute path",
            path.display()
        );
    }
    CString::new(path.as_os_str().as_bytes()).context("NUL in a path")
}

/// A normalized absolute view path, as a path relative to the new root. `/` itself is
/// refused: the new root is cordon's own tmpfs.
fn relative(path: &Path) -> anyhow::Result<CString> {
    let b = path.as_os_str().as_bytes();
    if plainly_normal(b) {
        return CString::new(&b[1..]).context("NUL in a path");
    }
    if !path.is_absolute() || path.components().any(|c| !normal_or_root(c)) {
        bail!(
            "target `{}` is not a normalized absolute path",
            path.display()
        );
    }
    let rel = path.strip_prefix("/").expect("absolute");
    if rel.as_os_str().is_empty() {
        bail!("a mount over `/` itself is not supported by the view");
    }
    CString::new(rel.as_os_str().as_bytes()).context("NUL in a path")
}

fn normal_or_root(c: Component<'_>) -> bool {
    matches!(c, Component::Normal(_) | Component::RootDir)
}

impl PreparedView {
    /// The number of mounts in the list.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Take over the Landlock rules whose path is exactly where a bind is attached and
    /// stays visible (no later mount at that path or above it): `apply` adds each on the
    /// descriptor of the mount it has just attached there, whose root is the very inode
    /// the command reaches at that path, so the rule binds where an `open` of the path in
    /// the finished view would have bound it, without opening it. `apply` must then be
    /// given `landlock`, after [`PreparedLandlock::begin`].
    pub fn adopt_landlock(&mut self, landlock: &mut PreparedLandlock) {
        // The last op at each target.
        let last: FastMap<&[u8], usize> = self
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| (op.target().to_bytes(), i))
            .collect();
        let visible = |i: usize, target: &[u8]| {
            let mut t = target;
            loop {
                if last.get(t).is_some_and(|&j| j > i) {
                    return false;
                }
                match t.iter().rposition(|c| *c == b'/') {
                    Some(cut) => t = &t[..cut],
                    None => return true,
                }
            }
        };
        let mut at: FastMap<&[u8], usize> = FastMap::default();
        at.reserve(self.ops.len());
        for (i, op) in self.ops.iter().enumerate() {
            if let Op::Bind { target, .. } = op {
                if visible(i, target.to_bytes()) {
                    at.insert(target.to_bytes(), i);
                }
            }
        }
        let mut adopted = Vec::new();
        landlock.adopt(
            |path, rights| match path.strip_prefix(b"/").and_then(|p| at.get(p)) {
                Some(&i) => {
                    adopted.push((i, rights));
                    true
                }
                None => false,
            },
        );
        drop(at);
        drop(last);
        for (i, rights) in adopted {
            if let Op::Bind { landlock, .. } = &mut self.ops[i] {
                *landlock |= rights;
            }
        }
    }

    /// Build the view and pivot into it (see the module documentation). Runs in the child
    /// after fork, as PID 1 of a new PID namespace, inside a new mount namespace (and user
    /// namespace when not root) with full capabilities there. Async-signal-safe: no heap
    /// allocation, no locks. On success the root is the view and the cwd is `/`; on error
    /// the process is in an undefined half-built view and must exit.
    pub fn apply(&self, landlock: Option<&PreparedLandlock>) -> Result<(), StepError> {
        let global = at(NO_INDEX);
        // Step 2 holds its sources open at once: make room when there are very many.
        let _nofile = NofileAtLeast::raise(self.early + 64);
        // Whatever is still held when this returns, on success or error, is closed (before
        // the limit above is restored: locals drop in reverse order).
        let _held = CloseHeld(&self.held);

        // 1. Nothing propagates back to the host.
        sys_mount(c"/", libc::MS_REC | libc::MS_PRIVATE).map_err(&global)?;

        // 2. Pin and clone the sources the new root will cover, before it is mounted.
        let mut sources = DirCache::new();
        let mut nodes = [const { Fd(-1) }; DEV_NODES.len()];
        for (i, op) in self.ops.iter().enumerate() {
            match op {
                Op::Bind {
                    source,
                    is_dir,
                    attr,
                    dev_ino,
                    early: true,
                    ..
                } => {
                    let tree = clone_source(&mut sources, source, *is_dir, *dev_ino, *attr)
                        .map_err(at(i))?;
                    self.held[i].set(tree.into_raw());
                }
                Op::Dev { .. } => {
                    for (slot, (host, _)) in nodes.iter_mut().zip(DEV_NODES) {
                        *slot = clone_dev_node(host).map_err(at(i))?;
                    }
                }
                _ => {}
            }
        }

        // 3. The new root: a tmpfs over the staging dir, in this namespace only.
        let root = new_fs(
            c"tmpfs",
            &[(c"mode", c"0755"), (c"size", c"1m")],
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        )
        .map_err(&global)?;
        move_mount_to_path(root.0, STAGING).map_err(&global)?;
        let owned = Owned::new(&self.owned);
        owned.add(root.0).map_err(&global)?;

        // 4. The list, in order.
        let mut points = DirCache::new();
        let mut seals = self.seals.iter().peekable();
        let mut devfs = Fd(-1);
        let mut empty = Fd(-1);
        for (i, op) in self.ops.iter().enumerate() {
            let err = at(i);
            match op {
                Op::Bind {
                    source,
                    target,
                    is_dir,
                    attr,
                    dev_ino,
                    early,
                    landlock: rights,
                } => {
                    let tree = if *early {
                        Fd(self.held[i].replace(-1))
                    } else {
                        clone_source(&mut sources, source, *is_dir, *dev_ino, *attr)
                            .map_err(&err)?
                    };
                    let leaf = if *is_dir { Leaf::Dir } else { Leaf::File };
                    points
                        .attach(root.0, target, leaf, &owned, tree.0)
                        .map_err(&err)?;
                    if *rights != 0 {
                        // The mount's root is the inode the command reaches at `target`.
                        match landlock {
                            Some(ll) => ll.add_adopted(tree.0, *rights).map_err(|e| StepError {
                                step: e.step,
                                errno: e.errno,
                                index: i,
                            })?,
                            None => {
                                return Err(err(("Landlock rule without a ruleset", libc::EINVAL)))
                            }
                        }
                    }
                }
                Op::MaskDir { target } => {
                    let fs = new_fs(
                        c"tmpfs",
                        &[(c"mode", c"0755"), (c"size", c"16k")],
                        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                    )
                    .map_err(&err)?;
                    points
                        .attach(root.0, target, Leaf::Dir, &owned, fs.0)
                        .map_err(&err)?;
                    owned.add(fs.0).map_err(&err)?;
                    self.held[i].set(fs.into_raw());
                }
                Op::MaskFile { target } => {
                    if empty.0 < 0 {
                        let name = Name::new(EMPTY_FILE.to_bytes()).map_err(&err)?;
                        empty = open_leaf(root.0, &name, Leaf::File, &owned).map_err(&err)?;
                    }
                    let tree = open_tree(empty.0, 0).map_err(&err)?;
                    set_attr(
                        tree.0,
                        0,
                        MOUNT_ATTR_RDONLY
                            | MOUNT_ATTR_NOSUID
                            | MOUNT_ATTR_NODEV
                            | MOUNT_ATTR_NOEXEC,
                    )
                    .map_err(&err)?;
                    points
                        .attach(root.0, target, Leaf::File, &owned, tree.0)
                        .map_err(&err)?;
                }
                Op::Proc { target } => {
                    let fs = new_fs(
                        c"proc",
                        &[],
                        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                    )
                    .map_err(&err)?;
                    points
                        .attach(root.0, target, Leaf::Dir, &owned, fs.0)
                        .map_err(&err)?;
                }
                Op::Dev { target } => {
                    devfs = build_dev(root.0, target, &owned, &nodes).map_err(&err)?;
                    points.covered(target);
                }
                Op::Symlink { target, link } => {
                    let (dir, name) = points.parent(root.0, target, &owned).map_err(&err)?;
                    if !points.mine(&owned).map_err(&err)? {
                        return Err(err(("symlink inside a host bind", libc::EPERM)));
                    }
                    // SAFETY: both strings are NUL-terminated and outlive the call.
                    let r = unsafe { libc::symlinkat(link.as_ptr(), dir, name.as_ptr()) };
                    check(r, "symlink").map_err(&err)?;
                }
            }
            // Masks with nothing more to mount inside them are sealed now.
            while let Some(&(_, mask)) = seals.next_if(|(after, _)| *after == i) {
                let fs = Fd(self.held[mask].replace(-1));
                set_attr(fs.0, 0, MOUNT_ATTR_RDONLY).map_err(&global)?;
                owned.remove(fs.0).map_err(&global)?;
            }
        }

        // 5. Seal and pivot.
        if devfs.0 >= 0 {
            set_attr(devfs.0, 0, MOUNT_ATTR_RDONLY).map_err(&global)?;
        }
        if empty.0 >= 0 {
            // SAFETY: a NUL-terminated name relative to an open directory descriptor.
            let r = unsafe { libc::unlinkat(root.0, EMPTY_FILE.as_ptr(), 0) };
            check(r, "remove the empty mask file").map_err(&global)?;
        }
        drop(points);
        drop(sources);
        set_attr(root.0, 0, MOUNT_ATTR_RDONLY).map_err(&global)?;
        pivot(root.0).map_err(&global)
    }
}

/// Closes the descriptors left in a [`PreparedView`]'s slots when `apply` returns.
struct CloseHeld<'a>(&'a [Cell<i32>]);

impl Drop for CloseHeld<'_> {
    fn drop(&mut self) {
        for slot in self.0 {
            drop(Fd(slot.replace(-1)));
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to at least `need` (up to the hard limit) while it
/// lives, and restores it: the command gets the limit it would have had.
struct NofileAtLeast(Option<libc::rlimit>);

impl NofileAtLeast {
    fn raise(need: usize) -> NofileAtLeast {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `old` is a valid, writable rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) } != 0 {
            return NofileAtLeast(None);
        }
        let need = need as libc::rlim_t;
        if old.rlim_cur >= need || old.rlim_cur == libc::RLIM_INFINITY {
            return NofileAtLeast(None);
        }
        let new = libc::rlimit {
            rlim_cur: need.min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        // SAFETY: `new` is a valid rlimit no higher than the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
            return NofileAtLeast(None);
        }
        NofileAtLeast(Some(old))
    }
}

impl Drop for NofileAtLeast {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: restoring the limit read before; every descriptor above it that
            // `apply` opened is closed by then.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, old) };
        }
    }
}

/// The directory that held the last path opened, kept for the next one (siblings come
/// together in the plan's list). The key borrows the path's bytes from the prepared
/// view: no allocation.
struct DirCache<'a> {
    key: &'a [u8],
    dir: Fd,
    /// For mountpoints: whether the directory is on a tmpfs of our own; found on demand.
    mine: Option<bool>,
    /// For sources: the kernel has no `open_tree_attr` (before 6.15).
    no_open_tree_attr: bool,
}

impl<'a> DirCache<'a> {
    fn new() -> DirCache<'a> {
        DirCache {
            key: &[],
            dir: Fd(-1),
            mine: None,
            no_open_tree_attr: false,
        }
    }

    fn hit(&self, key: &[u8]) -> bool {
        self.dir.0 >= 0 && self.key == key
    }

    fn keep(&mut self, key: &'a [u8], dir: Fd) {
        self.key = key;
        self.dir = dir;
        self.mine = None;
    }

    /// The directory holding the last component of `rel` beneath the new root `root`
    /// (created as needed on our own tmpfs), and that component. The descriptor stays
    /// owned by the cache.
    fn parent(&mut self, root: i32, rel: &'a CStr, owned: &Owned<'_>) -> Step<(i32, Name)> {
        let bytes = rel.to_bytes();
        let (dir, last) = match bytes.iter().rposition(|c| *c == b'/') {
            Some(cut) => (&bytes[..cut], &bytes[cut + 1..]),
            None => (&bytes[..0], bytes),
        };
        if !self.hit(dir) {
            let fd = walk_beneath(root, dir, owned)?;
            self.keep(dir, fd);
        }
        Ok((self.dir.0, Name::new(last)?))
    }

    /// Whether the kept directory is on a tmpfs of our own.
    fn mine(&mut self, owned: &Owned<'_>) -> Step<bool> {
        match self.mine {
            Some(mine) => Ok(mine),
            None => {
                let mine = owned.contains(self.dir.0)?;
                self.mine = Some(mine);
                Ok(mine)
            }
        }
    }

    /// Open the mountpoint `rel` beneath `root`, creating what is missing only on a tmpfs
    /// of cordon's own. Never follows a symlink.
    fn open_point(&mut self, root: i32, rel: &'a CStr, leaf: Leaf, owned: &Owned<'_>) -> Step<Fd> {
        let (dir, name) = self.parent(root, rel, owned)?;
        if self.mine(owned)? {
            // On our own tmpfs the mountpoint is usually missing: create it first (an
            // existing one is fine) rather than look it up twice.
            return create_leaf(dir, &name, leaf, true);
        }
        match try_open_leaf(dir, &name, leaf) {
            Ok(fd) => Ok(fd),
            Err(libc::ENOENT) => create_leaf(dir, &name, leaf, false),
            Err(e) => Err(("open mountpoint", e)),
        }
    }

    /// Attach the detached mount `tree` at `rel` beneath `root` (see [`Self::open_point`]).
    ///
    /// Where the mountpoint is missing on a tmpfs of our own, it is created and the mount
    /// attached to it by name, relative to the kept directory: the name was just created
    /// by us, in a filesystem only this process can reach, and `move_mount` follows no
    /// symlink on its target without `MOVE_MOUNT_T_SYMLINKS`. That saves opening and
    /// closing every mountpoint of the many a large policy has in one directory. Anything
    /// else (an existing name, a host bind) takes the careful way through `open_point`.
    fn attach(
        &mut self,
        root: i32,
        rel: &'a CStr,
        leaf: Leaf,
        owned: &Owned<'_>,
        tree: i32,
    ) -> Step<()> {
        let (dir, name) = self.parent(root, rel, owned)?;
        if self.mine(owned)? && create_fresh(dir, &name, leaf)? {
            // SAFETY: empty NUL-terminated source path with MOVE_MOUNT_F_EMPTY_PATH names
            // `tree`; `name` is one NUL-terminated component relative to `dir`.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    tree,
                    c"".as_ptr(),
                    dir,
                    name.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                )
            };
            check(r as libc::c_int, "move_mount")?;
        } else {
            let point = self.open_point(root, rel, leaf, owned)?;
            move_mount_fd(tree, point.0)?;
        }
        self.covered(rel);
        Ok(())
    }

    /// A mount now covers `rel`: a kept directory at or beneath it is the one underneath.
    fn covered(&mut self, rel: &CStr) {
        let t = rel.to_bytes();
        let k = self.key;
        if self.dir.0 >= 0 && k.starts_with(t) && (k.len() == t.len() || k[t.len()] == b'/') {
            self.dir = Fd(-1);
        }
    }
}

/// An owned file descriptor, closed on drop (`-1`: none). `close` is async-signal-safe.
#[derive(Debug)]
struct Fd(i32);

impl Fd {
    /// Give up ownership: the caller closes the descriptor.
    fn into_raw(self) -> i32 {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: the descriptor is owned by this value and closed once.
            unsafe { libc::close(self.0) };
        }
    }
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

fn check(r: libc::c_int, step: &'static str) -> Step<()> {
    if r < 0 {
        Err((step, errno()))
    } else {
        Ok(())
    }
}

fn check_fd(r: libc::c_long, step: &'static str) -> Step<Fd> {
    if r < 0 {
        Err((step, errno()))
    } else {
        Ok(Fd(r as i32))
    }
}

fn sys_mount(target: &CStr, flags: libc::c_ulong) -> Step<()> {
    // SAFETY: NULL source, fstype and data are allowed for a propagation change; the
    // target is NUL-terminated.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    check(r, "make mounts private")
}

fn openat2(dir: i32, path: &CStr, flags: i32, resolve: u64) -> Result<Fd, i32> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: `path` is NUL-terminated, `how` is a valid open_how of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(Fd(r as i32))
    }
}

fn fstat(fd: i32) -> Result<libc::stat, i32> {
    // SAFETY: all-zero is a valid `struct stat`; it is only read after fstat filled it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `struct stat`.
    let r = unsafe { libc::fstat(fd, &mut st) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(st)
    }
}

fn open_tree(fd: i32, extra: libc::c_uint) -> Step<Fd> {
    let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint | extra;
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH names `fd` itself.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, fd, c"".as_ptr(), flags) };
    check_fd(r, "open_tree")
}

fn set_attr(fd: i32, extra: libc::c_uint, attr_set: u64) -> Step<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | extra;
    // SAFETY: `attr` is a valid mount_attr of the size passed; empty path with AT_EMPTY_PATH.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(r as libc::c_int, "mount_setattr")
}

fn move_mount_fd(from: i32, to: i32) -> Step<()> {
    // SAFETY: empty NUL-terminated paths with both *_EMPTY_PATH flags name the descriptors.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from,
            c"".as_ptr(),
            to,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(r as libc::c_int, "move_mount")
}

fn move_mount_to_path(from: i32, to: &CStr) -> Step<()> {
    // SAFETY: empty source path with MOVE_MOUNT_F_EMPTY_PATH; `to` is NUL-terminated.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from,
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(r as libc::c_int, "mount the new root")
}

/// A new detached filesystem mount: `fsopen` + `fsconfig` + `fsmount`. An option with an
/// empty value is a flag.
fn new_fs(fstype: &'static CStr, opts: &[(&CStr, &CStr)], attrs: u64) -> Step<Fd> {
    let step = match fstype.to_bytes() {
        b"proc" => "mount proc",
        b"devpts" => "mount devpts",
        _ => "mount tmpfs",
    };
    // SAFETY: NUL-terminated filesystem type.
    let r = unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) };
    let fs = check_fd(r, step)?;
    for (key, value) in opts {
        let (cmd, value) = if value.is_empty() {
            (FSCONFIG_SET_FLAG, std::ptr::null())
        } else {
            (FSCONFIG_SET_STRING, value.as_ptr())
        };
        // SAFETY: NUL-terminated key, and value NUL-terminated or NULL for a flag.
        let r = unsafe { libc::syscall(libc::SYS_fsconfig, fs.0, cmd, key.as_ptr(), value, 0) };
        check(r as libc::c_int, step)?;
    }
    // SAFETY: FSCONFIG_CMD_CREATE takes no key or value.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.0,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    };
    check(r as libc::c_int, step)?;
    // SAFETY: `fs` is a configured filesystem context.
    let r = unsafe { libc::syscall(libc::SYS_fsmount, fs.0, FSMOUNT_CLOEXEC, attrs) };
    check_fd(r, step)
}

/// Clone a host source detached, with the rule's reductions applied, without following
/// any symlink, and check it against the plan.
///
/// The source is cloned by name relative to its parent directory (`open_tree_attr`, one
/// syscall: clone and attributes together), the parent opened with
/// `openat2(RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)` and kept in `dirs` for the next
/// sibling. The last component is not followed (`AT_SYMLINK_NOFOLLOW`): a symlink swapped
/// in since `plan` yields a clone of the link itself, refused below with `ELOOP`, as
/// `openat2` refuses it. The clone's root is the source's inode, so its `(dev, ino)` is
/// what `plan` recorded.
fn clone_source<'a>(
    dirs: &mut DirCache<'a>,
    source: &'a CStr,
    is_dir: bool,
    dev_ino: (u64, u64),
    attr: u64,
) -> Step<Fd> {
    let tree = clone_by_name(dirs, source, attr)?;
    let st = fstat(tree.0).map_err(|e| ("open source", e))?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK {
        return Err(("open source", libc::ELOOP));
    }
    if (dev_ino != (0, 0) && (st.st_dev, st.st_ino) != dev_ino) || (kind == libc::S_IFDIR) != is_dir
    {
        return Err(("source changed since plan", libc::ESTALE));
    }
    Ok(tree)
}

/// The clone of [`clone_source`]: by name relative to the kept parent directory, or,
/// where the parent cannot be opened (or for `/`), from an `openat2` of the whole path,
/// for the exact error.
fn clone_by_name<'a>(dirs: &mut DirCache<'a>, source: &'a CStr, attr: u64) -> Step<Fd> {
    let resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    let recursive = libc::AT_RECURSIVE as libc::c_uint;
    let whole = |dirs: &mut DirCache<'a>| -> Step<Fd> {
        let fd = openat2(libc::AT_FDCWD, source, libc::O_PATH, resolve)
            .map_err(|e| ("open source", e))?;
        clone_tree(&mut dirs.no_open_tree_attr, fd.0, c"", recursive, attr)
    };
    let bytes = source.to_bytes_with_nul();
    let cut = match bytes.iter().rposition(|c| *c == b'/') {
        Some(cut) if cut + 2 < bytes.len() => cut,
        _ => return whole(dirs), // `/`
    };
    let parent = if cut == 0 { &bytes[..1] } else { &bytes[..cut] };
    if !dirs.hit(parent) {
        let mut buf = [0u8; libc::PATH_MAX as usize];
        if parent.len() >= buf.len() {
            return whole(dirs);
        }
        buf[..parent.len()].copy_from_slice(parent);
        let c_parent =
            CStr::from_bytes_until_nul(&buf).map_err(|_| ("open source", libc::EINVAL))?;
        match openat2(
            libc::AT_FDCWD,
            c_parent,
            libc::O_PATH | libc::O_DIRECTORY,
            resolve,
        ) {
            Ok(fd) => dirs.keep(parent, fd),
            Err(_) => return whole(dirs),
        }
    }
    let name =
        CStr::from_bytes_with_nul(&bytes[cut + 1..]).map_err(|_| ("open source", libc::EINVAL))?;
    let dir = dirs.dir.0;
    let extra = recursive
        | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint
        | libc::AT_NO_AUTOMOUNT as libc::c_uint;
    clone_tree(&mut dirs.no_open_tree_attr, dir, name, extra, attr).map_err(|(step, e)| {
        // The lookup of the name failed: the source is not there as planned.
        match e {
            libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP => ("open source", e),
            _ => (step, e),
        }
    })
}

/// `open_tree(dir, name, OPEN_TREE_CLONE | extra)` with the mount attributes `attr_set`
/// applied to the clone (recursively when `extra` has `AT_RECURSIVE`): one
/// `open_tree_attr` where the kernel has it (6.15), else `open_tree` and `mount_setattr`.
/// `*unsupported` remembers that it has not, so the fallback costs one failed call.
fn clone_tree(
    unsupported: &mut bool,
    dir: i32,
    name: &CStr,
    extra: libc::c_uint,
    attr_set: u64,
) -> Step<Fd> {
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | extra;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH as libc::c_uint;
    }
    if !*unsupported {
        let attr = MountAttr {
            attr_set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `name` is NUL-terminated, `attr` a valid mount_attr of the size passed.
        let r = unsafe {
            libc::syscall(
                SYS_OPEN_TREE_ATTR,
                dir,
                name.as_ptr(),
                flags,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r >= 0 || errno() != libc::ENOSYS {
            return check_fd(r, "open_tree");
        }
        *unsupported = true;
    }
    // SAFETY: `name` is NUL-terminated (empty with AT_EMPTY_PATH: `dir` itself).
    let r = unsafe { libc::syscall(libc::SYS_open_tree, dir, name.as_ptr(), flags) };
    let tree = check_fd(r, "open_tree")?;
    set_attr(tree.0, extra & libc::AT_RECURSIVE as libc::c_uint, attr_set)?;
    Ok(tree)
}

/// A host character device for the minimal `/dev`, cloned nosuid+noexec (device
/// semantics kept). Missing: `Fd(-1)`, skipped.
fn clone_dev_node(host: &CStr) -> Step<Fd> {
    let fd = match openat2(
        libc::AT_FDCWD,
        host,
        libc::O_PATH,
        RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(libc::ENOENT) => return Ok(Fd(-1)),
        Err(e) => return Err(("open a /dev node", e)),
    };
    let st = fstat(fd.0).map_err(|e| ("open a /dev node", e))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return Err(("a /dev node is not a character device", libc::ENODEV));
    }
    let tree = open_tree(fd.0, 0)?;
    set_attr(tree.0, 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)?;
    Ok(tree)
}

/// The minimal `/dev`: returns its tmpfs, to be made read-only at the end.
fn build_dev(root: i32, target: &CStr, owned: &Owned<'_>, nodes: &[Fd]) -> Step<Fd> {
    let dev = new_fs(
        c"tmpfs",
        &[(c"mode", c"0755"), (c"size", c"64k")],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
    )?;
    let point = open_beneath(root, target, Leaf::Dir, owned)?;
    move_mount_fd(dev.0, point.0)?;
    owned.add(dev.0)?;
    for (tree, (_, name)) in nodes.iter().zip(DEV_NODES) {
        if tree.0 < 0 {
            continue;
        }
        let point = open_leaf(dev.0, &Name::new(name.to_bytes())?, Leaf::File, owned)?;
        move_mount_fd(tree.0, point.0)?;
    }
    // A private pty instance. No gid= option: gid 5 may not be mapped in a userns.
    let pts = new_fs(
        c"devpts",
        &[
            (c"newinstance", c""),
            (c"ptmxmode", c"0666"),
            (c"mode", c"0620"),
        ],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
    )?;
    let point = open_leaf(dev.0, &Name::new(b"pts")?, Leaf::Dir, owned)?;
    move_mount_fd(pts.0, point.0)?;
    let shm = new_fs(
        c"tmpfs",
        &[(c"mode", c"1777")],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
    )?;
    let point = open_leaf(dev.0, &Name::new(b"shm")?, Leaf::Dir, owned)?;
    move_mount_fd(shm.0, point.0)?;
    for (name, link) in DEV_LINKS {
        // SAFETY: NUL-terminated strings; `dev.0` is an open directory descriptor.
        let r = unsafe { libc::symlinkat(link.as_ptr(), dev.0, name.as_ptr()) };
        check(r, "symlink in /dev")?;
    }
    Ok(dev)
}

/// One path component, NUL-terminated, on the stack.
struct Name {
    buf: [u8; 256],
}

impl Name {
    fn new(component: &[u8]) -> Step<Name> {
        if component.is_empty() || component.len() > 255 || component.contains(&0) {
            return Err(("bad path component", libc::ENAMETOOLONG));
        }
        if component == b"." || component == b".." {
            return Err(("bad path component", libc::EINVAL));
        }
        let mut buf = [0u8; 256];
        buf[..component.len()].copy_from_slice(component);
        Ok(Name { buf })
    }

    fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).expect("NUL-terminated by construction")
    }

    fn as_ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr().cast()
    }
}

/// The device numbers of the tmpfs mounts cordon made that can still get mountpoints: the
/// only places it creates files. Stored in the prepared view's cells (room for the new
/// root, `/dev` and every mask); a sealed mask leaves the set, so it stays small.
struct Owned<'a> {
    devs: &'a [Cell<u64>],
    len: Cell<usize>,
}

impl<'a> Owned<'a> {
    fn new(devs: &'a [Cell<u64>]) -> Owned<'a> {
        Owned {
            devs,
            len: Cell::new(0),
        }
    }

    fn add(&self, fd: i32) -> Step<()> {
        let st = fstat(fd).map_err(|e| ("stat a new tmpfs", e))?;
        let len = self.len.get();
        if len == self.devs.len() {
            return Err(("too many tmpfs mounts", libc::ENOSPC));
        }
        self.devs[len].set(st.st_dev);
        self.len.set(len + 1);
        Ok(())
    }

    fn remove(&self, fd: i32) -> Step<()> {
        let st = fstat(fd).map_err(|e| ("stat a sealed tmpfs", e))?;
        let len = self.len.get();
        if let Some(i) = self.devs[..len].iter().position(|d| d.get() == st.st_dev) {
            self.devs[i].set(self.devs[len - 1].get());
            self.len.set(len - 1);
        }
        Ok(())
    }

    fn contains(&self, fd: i32) -> Step<bool> {
        let st = fstat(fd).map_err(|e| ("stat a mountpoint's directory", e))?;
        Ok(self.devs[..self.len.get()]
            .iter()
            .any(|d| d.get() == st.st_dev))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    Dir,
    File,
}

/// Open `rel` beneath `base`, creating what is missing (directories, and the leaf as a
/// directory or an empty file) only on a tmpfs of cordon's own. Never follows a symlink.
fn open_beneath(base: i32, rel: &CStr, leaf: Leaf, owned: &Owned<'_>) -> Step<Fd> {
    let bytes = rel.to_bytes();
    let (dir, last) = match bytes.iter().rposition(|c| *c == b'/') {
        Some(cut) => (&bytes[..cut], &bytes[cut + 1..]),
        None => (&bytes[..0], bytes),
    };
    let dir = walk_beneath(base, dir, owned)?;
    open_leaf(dir.0, &Name::new(last)?, leaf, owned)
}

/// Open the directory `rel` (its components separated by `/`; empty: `base` itself)
/// beneath `base`, creating missing directories only on a tmpfs of cordon's own.
fn walk_beneath(base: i32, rel: &[u8], owned: &Owned<'_>) -> Step<Fd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we hold; the result is owned by `Fd`.
    let r = unsafe { libc::fcntl(base, libc::F_DUPFD_CLOEXEC, 0) };
    let mut dir = check_fd(r as libc::c_long, "dup")?;
    for part in rel.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        dir = open_leaf(dir.0, &Name::new(part)?, Leaf::Dir, owned)?;
    }
    Ok(dir)
}

fn open_leaf(dir: i32, name: &Name, leaf: Leaf, owned: &Owned<'_>) -> Step<Fd> {
    match try_open_leaf(dir, name, leaf) {
        Ok(fd) => Ok(fd),
        Err(libc::ENOENT) => create_leaf(dir, name, leaf, owned.contains(dir)?),
        Err(e) => Err(("open mountpoint", e)),
    }
}

fn leaf_flags(leaf: Leaf) -> i32 {
    libc::O_PATH
        | match leaf {
            Leaf::Dir => libc::O_DIRECTORY,
            Leaf::File => 0,
        }
}

const LEAF_RESOLVE: u64 = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

fn try_open_leaf(dir: i32, name: &Name, leaf: Leaf) -> Result<Fd, i32> {
    openat2(dir, name.as_cstr(), leaf_flags(leaf), LEAF_RESOLVE)
}

/// Create a missing mountpoint in `dir`, which must be on a tmpfs of cordon's own
/// (`mine`), and open it.
fn create_leaf(dir: i32, name: &Name, leaf: Leaf, mine: bool) -> Step<Fd> {
    if !mine {
        return Err(("mountpoint missing inside a host bind", libc::ENOENT));
    }
    let r = match leaf {
        // SAFETY: NUL-terminated name relative to an open directory descriptor.
        Leaf::Dir => unsafe { libc::mkdirat(dir, name.as_ptr(), 0o755) },
        Leaf::File => {
            let flags =
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            // SAFETY: NUL-terminated name relative to an open directory; the new
            // descriptor is closed right away by `Fd`.
            let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, 0o444 as libc::c_uint) };
            drop(Fd(fd));
            fd
        }
    };
    if r < 0 && errno() != libc::EEXIST {
        return Err(("create mountpoint", errno()));
    }
    try_open_leaf(dir, name, leaf).map_err(|e| ("open mountpoint", e))
}

/// Create the missing mountpoint `name` in `dir` (a tmpfs of cordon's own): `true` when
/// this call created it, `false` when something of that name exists already.
fn create_fresh(dir: i32, name: &Name, leaf: Leaf) -> Step<bool> {
    let r = match leaf {
        // SAFETY: NUL-terminated name relative to an open directory descriptor.
        Leaf::Dir => unsafe { libc::mkdirat(dir, name.as_ptr(), 0o755) },
        // An empty regular file; mknod needs no privilege for S_IFREG.
        // SAFETY: NUL-terminated name relative to an open directory descriptor.
        Leaf::File => unsafe { libc::mknodat(dir, name.as_ptr(), libc::S_IFREG | 0o444, 0) },
    };
    match r {
        0 => Ok(true),
        _ if errno() == libc::EEXIST => Ok(false),
        _ => Err(("create mountpoint", errno())),
    }
}

/// Pivot into `root` and detach the old root.
fn pivot(root: i32) -> Step<()> {
    // SAFETY: `root` is an open directory descriptor.
    check(unsafe { libc::fchdir(root) }, "chdir into the new root")?;
    // SAFETY: NUL-terminated paths; pivot_root(".", ".") stacks the old root on the new.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    check(r as libc::c_int, "pivot_root")?;
    // SAFETY: NUL-terminated path; detaches the old root stacked on ".".
    let r = unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) };
    check(r, "detach the old root")?;
    // SAFETY: NUL-terminated path.
    check(unsafe { libc::chdir(c"/".as_ptr()) }, "chdir /")
}

#[cfg(test)]
mod tests {
    //! Every view is built in a forked child that has unshared its own namespaces, never
    //! in the test process. Fixtures live under a fresh temp dir removed afterwards.
    use super::*;
    use std::fs;
    use std::io::{Read as _, Write as _};
    use std::os::fd::FromRawFd as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const NOBODY: u32 = 65534;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            TempDir::under(&std::env::temp_dir())
        }

        fn under(parent: &Path) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            let dir = parent.join(format!("cordon-view-{}-{n}", std::process::id()));
            fs::create_dir_all(parent).unwrap();
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
            TempDir(dir.canonicalize().unwrap())
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn dev_ino(p: &Path) -> (u64, u64) {
        let m = fs::symlink_metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    fn bind(source: &Path, read_only: bool, exec: bool) -> Mount {
        Mount::Bind {
            source: source.to_path_buf(),
            target: source.to_path_buf(),
            is_dir: source.is_dir(),
            read_only,
            exec,
            device: false,
            dev_ino: dev_ino(source),
        }
    }

    /// The host's system dirs as the plan would list them: merged-/usr symlinks, rx binds.
    fn system_mounts() -> Vec<Mount> {
        let mut out = Vec::new();
        for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let p = Path::new("/").join(name);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => out.push(Mount::Symlink {
                    link: fs::read_link(&p).unwrap(),
                    target: p,
                }),
                Ok(m) if m.is_dir() => out.push(bind(&p, true, true)),
                _ => {}
            }
        }
        out.push(bind(Path::new("/usr"), true, true));
        out
    }

    fn cstr(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    /// Raw write of a whole buffer, for the forked children.
    fn write_all(fd: i32, mut buf: &[u8]) {
        while !buf.is_empty() {
            // SAFETY: `buf` is a valid readable slice of the length passed.
            let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
            buf = &buf[n as usize..];
        }
    }

    fn write_file(path: &CStr, data: &[u8]) -> bool {
        // SAFETY: NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        // SAFETY: `data` is a valid slice of the length passed.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        // SAFETY: `fd` was opened above.
        unsafe { libc::close(fd) };
        n == data.len() as isize
    }

    /// Run `body` in a grandchild that is PID 1 of new PID and mount namespaces (and a new
    /// user namespace as uid/gid 65534 when `unprivileged`). `body`'s error comes back
    /// through a pipe; the grandchild's exit code is the result.
    fn in_namespaces(
        unprivileged: bool,
        body: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        // SAFETY: the child only makes raw syscalls until it forks the grandchild, which
        // runs `body` and exits with `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: raw syscalls on our own process; every path ends in `_exit`.
            unsafe {
                libc::close(rd);
                let fail = |what: &[u8]| -> ! {
                    write_all(wr, what);
                    libc::_exit(100)
                };
                let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
                if unprivileged {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setresgid(NOBODY, NOBODY, NOBODY) != 0
                        || libc::setresuid(NOBODY, NOBODY, NOBODY) != 0
                    {
                        fail(b"drop to nobody");
                    }
                    // Changing uid made us non-dumpable: /proc/self would be root's.
                    libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                    flags |= libc::CLONE_NEWUSER;
                }
                if libc::unshare(flags) != 0 {
                    fail(b"unshare");
                }
                if unprivileged
                    && !(write_file(c"/proc/self/setgroups", b"deny")
                        && write_file(c"/proc/self/uid_map", b"65534 65534 1")
                        && write_file(c"/proc/self/gid_map", b"65534 65534 1"))
                {
                    fail(b"write the id maps");
                }
                let pid = libc::fork();
                if pid < 0 {
                    fail(b"fork the grandchild");
                }
                if pid == 0 {
                    let code = match body() {
                        Ok(()) => 0,
                        Err(msg) => {
                            write_all(wr, msg.as_bytes());
                            1
                        }
                    };
                    libc::_exit(code);
                }
                let mut status = 0;
                if libc::waitpid(pid, &mut status, 0) != pid {
                    fail(b"waitpid");
                }
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    fail(b"the grandchild was killed by a signal")
                };
                libc::_exit(code);
            }
        }
        // SAFETY: our copy of the write end; the read end is ours to own.
        unsafe { libc::close(wr) };
        // SAFETY: `rd` is an open pipe end owned by nobody else.
        let mut pipe = unsafe { fs::File::from_raw_fd(rd) };
        let mut msg = String::new();
        pipe.read_to_string(&mut msg).unwrap();
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child killed: {status}");
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            code => Err(format!("exit {code}: {msg}")),
        }
    }

    fn ensure(ok: bool, what: &str) -> Result<(), String> {
        if ok {
            Ok(())
        } else {
            Err(what.to_string())
        }
    }

    fn errno_of<T>(r: std::io::Result<T>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    /// A workspace with a denied dir, a denied file, a read-only `.git` and an rx
    /// carve-out inside the denied dir.
    struct Fixture {
        dir: TempDir,
        ws: PathBuf,
        outside: PathBuf,
        scratch: PathBuf,
    }

    fn fixture(owner: Option<u32>) -> Fixture {
        fixture_in(TempDir::new(), owner)
    }

    fn fixture_in(dir: TempDir, owner: Option<u32>) -> Fixture {
        let ws = dir.0.join("ws");
        fs::create_dir_all(ws.join("secrets/bin")).unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::write(ws.join(".env"), "TOKEN=hunter2\n").unwrap();
        fs::write(ws.join("secrets/key"), "private\n").unwrap();
        fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        for (path, code) in [("secrets/bin/tool", 7), ("run.sh", 0)] {
            let p = ws.join(path);
            fs::write(&p, format!("#!/bin/sh\nexit {code}\n")).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let outside = dir.0.join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("file"), "host\n").unwrap();
        let scratch = dir.0.join("scratch");
        fs::create_dir(&scratch).unwrap();
        if let Some(uid) = owner {
            for p in [&ws, &scratch] {
                std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
            }
        }
        Fixture {
            dir,
            ws,
            outside,
            scratch,
        }
    }

    fn fixture_mounts(f: &Fixture) -> Vec<Mount> {
        let mut m = system_mounts();
        m.push(Mount::Proc {
            target: "/proc".into(),
        });
        m.push(bind(&f.ws, false, false));
        m.push(Mount::MaskDir {
            target: f.ws.join("secrets"),
        });
        m.push(Mount::MaskFile {
            target: f.ws.join(".env"),
        });
        m.push(bind(&f.ws.join(".git"), true, false));
        m.push(bind(&f.ws.join("secrets/bin"), true, true));
        m.push(Mount::Dev {
            target: "/dev".into(),
        });
        // A device node bound without `device: true` keeps nodev: it cannot be opened.
        m.push(Mount::Bind {
            source: "/dev/zero".into(),
            target: "/dev/zero-nodev".into(),
            is_dir: false,
            read_only: false,
            exec: false,
            device: false,
            dev_ino: dev_ino(Path::new("/dev/zero")),
        });
        m.push(Mount::Bind {
            source: f.scratch.clone(),
            target: "/run/cordon".into(),
            is_dir: true,
            read_only: false,
            exec: true,
            device: false,
            dev_ino: (0, 0),
        });
        m
    }

    /// What the command must see inside the view built from `fixture_mounts`.
    fn check_view(f: &Fixture) -> Result<(), String> {
        let ws = &f.ws;
        // SAFETY: getpid has no preconditions.
        ensure(unsafe { libc::getpid() } == 1, "not PID 1")?;
        ensure(
            std::env::current_dir().ok().as_deref() == Some(Path::new("/")),
            "cwd is not /",
        )?;
        let env = fs::read(ws.join(".env")).map_err(|e| format!(".env: {e}"))?;
        ensure(env.is_empty(), ".env is not empty")?;
        ensure(
            errno_of(fs::write(ws.join(".env"), "x")) == Some(libc::EROFS),
            ".env mask is writable",
        )?;
        let mut names: Vec<_> = fs::read_dir(ws.join("secrets"))
            .map_err(|e| format!("ls secrets: {e}"))?
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        ensure(names == ["bin"], &format!("secrets lists {names:?}"))?;
        ensure(
            errno_of(fs::write(ws.join("secrets/new"), "x")) == Some(libc::EROFS),
            "secrets mask is writable",
        )?;
        ensure(
            errno_of(fs::write(ws.join(".git/x"), "x")) == Some(libc::EROFS),
            ".git is writable",
        )?;
        ensure(
            fs::read_to_string(ws.join(".git/HEAD")).is_ok_and(|s| s.starts_with("ref:")),
            ".git/HEAD unreadable",
        )?;
        fs::write(ws.join("written-inside"), "ok").map_err(|e| format!("write ws: {e}"))?;
        fs::write("/run/cordon/scratch-file", "ok").map_err(|e| format!("scratch: {e}"))?;
        // The merged-/usr symlinks and the rx binds: a shell runs.
        let sh = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 3"])
            .status()
            .map_err(|e| format!("/bin/sh: {e}"))?;
        ensure(sh.code() == Some(3), "/bin/sh did not run")?;
        // The rx carve-out inside the mask executes; the rw workspace does not.
        let tool = std::process::Command::new(ws.join("secrets/bin/tool"))
            .status()
            .map_err(|e| format!("tool: {e}"))?;
        ensure(tool.code() == Some(7), "carve-out tool did not run")?;
        let noexec = std::process::Command::new(ws.join("run.sh")).status();
        ensure(
            errno_of(noexec) == Some(libc::EACCES),
            "the rw workspace is executable",
        )?;
        // Only the sandbox's processes.
        let pids: Vec<String> = fs::read_dir("/proc")
            .map_err(|e| format!("ls /proc: {e}"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        ensure(
            pids.contains(&"1".to_string()) && pids.len() <= 3,
            &format!("/proc lists {pids:?}"),
        )?;
        // The minimal /dev.
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .and_then(|mut f| f.write_all(b"x"))
            .map_err(|e| format!("/dev/null: {e}"))?;
        let mut zero = [1u8; 4];
        fs::File::open("/dev/zero")
            .and_then(|mut f| f.read_exact(&mut zero))
            .map_err(|e| format!("/dev/zero: {e}"))?;
        ensure(zero == [0; 4], "/dev/zero")?;
        ensure(
            errno_of(fs::File::open("/dev/zero-nodev")) == Some(libc::EACCES),
            "a device bound without `device` opens",
        )?;
        ensure(
            fs::read_link("/dev/ptmx").ok().as_deref() == Some(Path::new("pts/ptmx")),
            "/dev/ptmx link",
        )?;
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/ptmx")
            .map_err(|e| format!("open /dev/ptmx: {e}"))?;
        fs::write("/dev/shm/x", "x").map_err(|e| format!("/dev/shm: {e}"))?;
        ensure(
            errno_of(fs::write("/dev/new", "x")) == Some(libc::EROFS),
            "/dev is writable",
        )?;
        ensure(
            fs::read_link("/dev/stdout").ok().as_deref() == Some(Path::new("/proc/self/fd/1")),
            "/dev/stdout link",
        )?;
        // Nothing else of the host.
        for p in [f.outside.as_path(), Path::new("/etc"), Path::new("/root")] {
            ensure(
                errno_of(fs::symlink_metadata(p)) == Some(libc::ENOENT),
                &format!("{} is visible", p.display()),
            )?;
        }
        ensure(
            errno_of(fs::symlink_metadata(Path::new("/").join(".cordon-empty")))
                == Some(libc::ENOENT),
            "the empty mask file is left over",
        )?;
        ensure(
            errno_of(fs::write("/top-level", "x")) == Some(libc::EROFS),
            "the new root is writable",
        )?;
        Ok(())
    }

    fn run_view(unprivileged: bool) {
        let f = fixture(unprivileged.then_some(NOBODY));
        let view = prepare(&fixture_mounts(&f)).unwrap();
        let r = in_namespaces(unprivileged, || {
            view.apply(None).map_err(|e| e.to_string())?;
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            ensure(
                euid == if unprivileged { NOBODY } else { 0 },
                "wrong uid in the view",
            )?;
            check_view(&f)
        });
        r.unwrap();
        // The rw bind reached the host; the masks left the host files alone.
        assert_eq!(
            fs::read_to_string(f.ws.join("written-inside")).unwrap(),
            "ok"
        );
        assert_eq!(
            fs::read_to_string(f.scratch.join("scratch-file")).unwrap(),
            "ok"
        );
        assert!(fs::read_to_string(f.ws.join(".env"))
            .unwrap()
            .starts_with("TOKEN"));
        assert!(!f.ws.join(".git/x").exists());
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn view_as_root() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        run_view(false);
    }

    #[test]
    fn view_in_user_namespace() {
        if !is_root() {
            eprintln!("skipped: needs root to become uid 65534 first");
            return;
        }
        run_view(true);
    }

    /// The source of a bind is swapped after `prepare`: apply must refuse it.
    fn swapped(replace: impl Fn(&Path, &Path)) -> StepError {
        let dir = TempDir::new();
        let data = dir.0.join("data");
        let other = dir.0.join("other");
        fs::create_dir(&data).unwrap();
        fs::create_dir(&other).unwrap();
        let view = prepare(&[bind(&data, true, false)]).unwrap();
        fs::rename(&data, dir.0.join("data.old")).unwrap();
        replace(&data, &other);
        let mut got = None;
        let r = in_namespaces(false, || match view.apply(None) {
            Ok(()) => Err("apply accepted a swapped source".into()),
            Err(e) => Err(format!("{}|{}|{}", e.step, e.errno, e.index)),
        });
        let msg = r.unwrap_err();
        let fields: Vec<&str> = msg.split_once(": ").unwrap().1.split('|').collect();
        if let [step, errno, index] = fields[..] {
            let step = [
                "open source",
                "source changed since plan",
                "open_tree",
                "mount_setattr",
            ]
            .into_iter()
            .find(|s| *s == step)
            .unwrap_or_else(|| panic!("unexpected step: {msg}"));
            got = Some(StepError {
                step,
                errno: errno.parse().unwrap(),
                index: index.parse().unwrap(),
            });
        }
        got.unwrap_or_else(|| panic!("unexpected report: {msg}"))
    }

    #[test]
    fn source_swapped_for_a_symlink_is_refused() {
        if !is_root() {
            return;
        }
        let e = swapped(|data, other| std::os::unix::fs::symlink(other, data).unwrap());
        assert_eq!(
            e,
            StepError {
                step: "open source",
                errno: libc::ELOOP,
                index: 0
            }
        );
    }

    #[test]
    fn source_replaced_after_plan_is_refused() {
        if !is_root() {
            return;
        }
        let e = swapped(|data, _| fs::create_dir(data).unwrap());
        assert_eq!(
            e,
            StepError {
                step: "source changed since plan",
                errno: libc::ESTALE,
                index: 0
            }
        );
    }

    /// Both ways of cloning a source (`open_tree_attr`, and `open_tree` + `mount_setattr`
    /// where the kernel lacks the former) apply the reductions to the clone and to the
    /// mounts beneath it, and neither follows a symlink in the last component.
    #[test]
    fn clone_applies_reductions_with_and_without_open_tree_attr() {
        if !is_root() {
            return;
        }
        let dir = TempDir::new();
        let data = dir.0.join("data");
        fs::create_dir_all(data.join("inner")).unwrap();
        std::os::unix::fs::symlink(&data, dir.0.join("link")).unwrap();
        let parent = cstr(dir.0.to_str().unwrap());
        let r = in_namespaces(false, || {
            // A mount beneath the source: the reductions must reach it too.
            let inner = cstr(data.join("inner").to_str().unwrap());
            // SAFETY: NUL-terminated strings; our own private mount namespace.
            let r = unsafe {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    inner.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            ensure(r == 0, "mount a tmpfs beneath the source")?;
            let dir = openat2(libc::AT_FDCWD, &parent, libc::O_PATH, 0)
                .map_err(|e| format!("open the parent: {e}"))?;
            let recursive =
                libc::AT_RECURSIVE as libc::c_uint | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
            let attr = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
            for unsupported in [false, true] {
                let mut flag = unsupported;
                let tree = clone_tree(&mut flag, dir.0, c"data", recursive, attr)
                    .map_err(|(s, e)| format!("clone ({unsupported}): {s}: {e}"))?;
                let point = cstr(data.to_str().unwrap());
                // Attach it over the source itself, then look at the mount beneath.
                move_mount_to_path(tree.0, &point).map_err(|(s, e)| format!("{s}: {e}"))?;
                for p in [data.clone(), data.join("inner")] {
                    let c = cstr(p.to_str().unwrap());
                    // SAFETY: all-zero is a valid statvfs, written by the call.
                    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
                    // SAFETY: NUL-terminated path, writable statvfs.
                    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
                    ensure(r == 0, "statvfs")?;
                    let want = libc::ST_RDONLY | libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC;
                    ensure(
                        st.f_flag & want == want,
                        &format!("{} lacks a reduction ({unsupported})", p.display()),
                    )?;
                }
                // SAFETY: NUL-terminated path in our private namespace.
                let r = unsafe { libc::umount2(point.as_ptr(), libc::MNT_DETACH) };
                ensure(r == 0, "umount")?;
                let mut flag = unsupported;
                let link = clone_tree(&mut flag, dir.0, c"link", recursive, attr)
                    .map_err(|(s, e)| format!("clone the link: {s}: {e}"))?;
                let st = fstat(link.0).map_err(|e| format!("fstat: {e}"))?;
                ensure(
                    st.st_mode & libc::S_IFMT == libc::S_IFLNK,
                    "the symlink was followed",
                )?;
            }
            Ok(())
        });
        r.unwrap();
    }

    #[test]
    fn target_inside_a_host_bind_is_never_created() {
        if !is_root() {
            return;
        }
        let f = fixture(None);
        let mounts = vec![
            bind(&f.ws, false, false),
            Mount::Bind {
                source: f.scratch.clone(),
                target: f.ws.join("not-on-host"),
                is_dir: true,
                read_only: false,
                exec: false,
                device: false,
                dev_ino: (0, 0),
            },
        ];
        let view = prepare(&mounts).unwrap();
        let r = in_namespaces(false, || match view.apply(None) {
            Err(e) if e.errno == libc::ENOENT && e.index == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        });
        r.unwrap();
        assert!(!f.ws.join("not-on-host").exists());
    }

    /// Landlock rules at a bind's target are adopted by the view, unless a later mount
    /// at that path (or above it) hides the bind; other rules stay with Landlock.
    #[test]
    fn view_adopts_landlock_rules_only_where_its_bind_stays_visible() {
        let b = |p: &str| Mount::Bind {
            source: PathBuf::from(p),
            target: PathBuf::from(p),
            is_dir: true,
            read_only: true,
            exec: false,
            device: false,
            dev_ino: (1, 1),
        };
        let mut view = prepare(&[
            b("/x"),
            b("/x/y"),
            b("/x/y/z"),
            Mount::MaskDir {
                target: PathBuf::from("/x/y"),
            },
            b("/w"),
        ])
        .unwrap();
        let rules: Vec<(PathBuf, u64)> = ["/x", "/x/y", "/x/y/z", "/w", "/v"]
            .iter()
            .map(|p| (PathBuf::from(p), 1))
            .collect();
        let mut ll = PreparedLandlock::new(1, 0, 0, &rules, &[])
            .unwrap()
            .unwrap();
        view.adopt_landlock(&mut ll);
        let adopted: Vec<u64> = view
            .ops
            .iter()
            .map(|op| match op {
                Op::Bind { landlock, .. } => *landlock,
                _ => u64::MAX,
            })
            .collect();
        assert_eq!(adopted, [1, 0, 0, u64::MAX, 1]);
        assert!(ll.adopted_any());
    }

    #[test]
    fn prepare_refuses_bad_targets() {
        let m = |t: &str| Mount::MaskDir { target: t.into() };
        assert!(prepare(&[m("relative/path")]).is_err());
        assert!(prepare(&[m("/a/../b")]).is_err());
        assert!(prepare(&[m("/")]).is_err());
        assert!(prepare(&[m("/a/./b")]).is_ok()); // `Path` normalizes `.` away
        let dev = Mount::Dev {
            target: "/dev".into(),
        };
        assert!(prepare(&[dev.clone(), dev]).is_err());
        // No fixed limit on the number of mounts.
        let many: Vec<Mount> = (0..10_000).map(|i| m(&format!("/m{i}"))).collect();
        assert_eq!(prepare(&many).unwrap().len(), 10_000);
        let v = prepare(&[m("/a/b")]).unwrap();
        assert_eq!(v.len(), 1);
        assert!(
            matches!(&v.ops[0], Op::MaskDir { target } if target.as_c_str() == cstr("a/b").as_c_str())
        );
    }

    fn nofile_soft() -> libc::rlim_t {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `r` is a valid, writable rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        r.rlim_cur
    }

    /// Far more binds and masks than descriptors: sources outside the staging dir are
    /// cloned one at a time; the many beneath it are held with a raised limit, restored.
    #[test]
    fn many_mounts_with_few_descriptors() {
        if !is_root() {
            return;
        }
        const N: usize = 700;
        // Outside the staging dir whatever the checkout's location.
        let late = TempDir::under(Path::new("/var/tmp/cordon-view-tests"));
        let early = TempDir::new(); // beneath /tmp
        let mut mounts = system_mounts();
        for base in [&late.0, &early.0] {
            let rw = base.join("rw");
            fs::create_dir(&rw).unwrap();
            mounts.push(bind(&rw, false, false));
            for i in 0..N {
                let d = rw.join(format!("d{i:04}"));
                fs::create_dir(&d).unwrap();
                fs::write(d.join("secret"), "s").unwrap();
                mounts.push(bind(&d, true, false));
            }
            for i in 0..N {
                mounts.push(Mount::MaskFile {
                    target: rw.join(format!("d{i:04}/secret")),
                });
            }
        }
        let view = prepare(&mounts).unwrap();
        let (late, early) = (late.0.clone(), early.0.clone());
        let r = in_namespaces(false, || {
            let mut low = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: `low` is a valid, writable rlimit.
            let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut low) } == 0;
            low.rlim_cur = 128;
            // SAFETY: a valid rlimit: only the soft limit is lowered.
            let lowered = read && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) } == 0;
            if !lowered || low.rlim_max < 2048 {
                return Err("setrlimit".into());
            }
            view.apply(None).map_err(|e| e.to_string())?;
            ensure(nofile_soft() == 128, "RLIMIT_NOFILE not restored")?;
            for base in [&late, &early] {
                for i in [0, N / 2, N - 1] {
                    let d = base.join(format!("rw/d{i:04}"));
                    ensure(d.is_dir(), &format!("{} missing", d.display()))?;
                    ensure(
                        errno_of(fs::write(d.join("new"), "x")) == Some(libc::EROFS),
                        &format!("{} is writable", d.display()),
                    )?;
                    ensure(
                        fs::read(d.join("secret")).is_ok_and(|c| c.is_empty()),
                        &format!("{}/secret is not masked", d.display()),
                    )?;
                }
                fs::write(base.join("rw/top"), "x").map_err(|e| format!("rw: {e}"))?;
            }
            Ok(())
        });
        r.unwrap();
        assert!(late.join("rw/top").exists() && early.join("rw/top").exists());
    }

    /// The real pipeline: the built-in `default` profile through `plan::build`, with the
    /// fixture workspace as the current directory and a home holding `.ssh`.
    fn run_default_profile(unprivileged: bool, under_tmp: bool) {
        use crate::plan::{self, Facts};
        use crate::policy::{load, Context, Overrides};
        // Not under /tmp, which the private tmp covers; the traversal to it must be open
        // to uid 65534. /var/tmp, not the checkout: a checkout may itself lie under /tmp
        // (or under a home uid 65534 cannot traverse).
        let base = if under_tmp {
            TempDir::new()
        } else {
            TempDir::under(Path::new("/var/tmp/cordon-view-tests"))
        };
        let f = fixture_in(base, unprivileged.then_some(NOBODY));
        // The current directory is the home: its keys must still be hidden.
        let home = f.ws.clone();
        fs::create_dir_all(home.join(".ssh")).unwrap();
        fs::write(home.join(".ssh/id_ed25519"), "key").unwrap();
        let ctx = Context {
            cwd: f.ws.clone(),
            home: home.clone(),
            env: Default::default(),
        };
        let policy = load(&Overrides::default(), &ctx).unwrap();
        let facts = Facts {
            uid: 0,
            gid: 0,
            is_root: !unprivileged,
            cwd: f.ws.clone(),
            home: home.clone(),
            user_name: "test".into(),
            env: Default::default(),
            landlock_abi: 6,
            namespaces: Ok(()),
            seccomp: true,
            scratch_root: f.dir.0.clone(),
            run_id: "t".into(),
            outer: None,
        };
        let plan = plan::build(&policy, &facts, &["true".into()]).unwrap();
        assert!(plan.view);
        // What launch does: the scratch dir with its tmp and home.
        let scratch = &plan.scratch.dir;
        for d in [scratch.clone(), scratch.join("tmp"), scratch.join("home")] {
            fs::create_dir_all(&d).unwrap();
            if unprivileged {
                std::os::unix::fs::chown(&d, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        let view = prepare(&plan.mounts).unwrap();
        if under_tmp {
            // The workspace lies beneath the private /tmp: its mountpoint would have to be
            // created in the host's scratch dir, which the view never does.
            let ws_index = plan
                .mounts
                .iter()
                .position(|m| matches!(m, Mount::Bind { target, .. } if *target == f.ws))
                .unwrap();
            let r = in_namespaces(unprivileged, || match view.apply(None) {
                Err(e)
                    if e.index == ws_index && e.step == "mountpoint missing inside a host bind" =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            });
            r.unwrap();
            assert_eq!(fs::read_dir(scratch.join("tmp")).unwrap().count(), 0);
            return;
        }
        let ws = f.ws.clone();
        let r = in_namespaces(unprivileged, || {
            view.apply(None)
                .map_err(|e| format!("{e} ({:?})", plan.mounts.get(e.index)))?;
            fs::write(ws.join("from-default"), "ok").map_err(|e| format!("cwd: {e}"))?;
            ensure(
                fs::read("/etc/shadow").is_ok_and(|c| c.is_empty()),
                "/etc/shadow is not masked",
            )?;
            ensure(
                fs::read_dir(home.join(".ssh")).is_ok_and(|mut d| d.next().is_none()),
                "~/.ssh is not masked",
            )?;
            ensure(fs::metadata("/etc/passwd").is_ok(), "/etc is missing")?;
            fs::write("/tmp/t", "x").map_err(|e| format!("/tmp: {e}"))?;
            fs::write("/run/cordon/home/h", "x").map_err(|e| format!("home: {e}"))?;
            let sh = std::process::Command::new("/bin/sh")
                .args(["-c", "exec 3>/dev/null && exit 4"])
                .status()
                .map_err(|e| format!("/bin/sh: {e}"))?;
            ensure(sh.code() == Some(4), "/bin/sh did not run")?;
            ensure(
                errno_of(fs::symlink_metadata(&f.outside)) == Some(libc::ENOENT),
                "a host dir outside the policy is visible",
            )
        });
        r.unwrap();
        assert_eq!(fs::read(scratch.join("tmp/t")).unwrap(), b"x");
        assert_eq!(fs::read(f.ws.join("from-default")).unwrap(), b"ok");
    }

    #[test]
    fn default_profile_as_root() {
        if is_root() {
            run_default_profile(false, false);
        }
    }

    #[test]
    fn default_profile_in_user_namespace() {
        if is_root() {
            run_default_profile(true, false);
        }
    }

    #[test]
    fn default_profile_workspace_under_private_tmp_is_refused() {
        if is_root() {
            run_default_profile(false, true);
        }
    }
}
