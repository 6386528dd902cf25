"""test_trust.py — who can read what through a mount (issue #22, docs/mount.md "Who can read
what"), with real FUSE mounts served by a root daemon with `-o allow_other` and reads made
as non-root users created here (useradd; reads through `setpriv --reuid/--regid
--init-groups`).

Checked: a step whose shard is a symlink to a root-only file gives its reader EACCES through
`.raw/` and the tensor files while root still reads it (likewise a HuggingFace `.safetensors`
file linked to a root-only one), and a symlink to a file the user may read keeps working; a 0700
checkpoint of 0600 files opens for its owner only and `stat` shows no group/other bits; 0600
shards under a readable `.metadata` refuse their tensors and values to others; a shard made
unreadable after mounting is refused at open (the daemon's own check, past the kernel's cached
modes); a group-readable checkpoint opens for a member (through a supplementary group) and not
for others; a POSIX ACL denying a user is honoured; a FIFO in place of a shard fails (naming it)
instead of hanging `ls` and `stat` in the mount, the mount itself, `ckpt cat` and `ckpt export`
(`ckpt verify` fails, `ckpt ls` lists), and other steps stay readable; an error about a file
that is not safetensors does not echo its bytes; a symlinked `latest` tracker is not followed; a
daemon run by a user decides other users from mode bits.

Environment: CKPTFS_BIN, CKPT_BIN (the built tools); CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_mount import BIN, FIXTURES, SANITIZER_MARKERS, Mount, Ref  # noqa: E402

CLI = os.environ.get("CKPT_BIN")
USERS = ("ckpttrust_a", "ckpttrust_b")
GROUP = "ckpttrust_g"
READER = r"""
import errno, sys
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            f.read(1)
        print("OK")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
"""

if os.geteuid() != 0:
    pytest.skip("needs root (creates users, mounts with allow_other)", allow_module_level=True)


@pytest.fixture(scope="module")
def users():
    made, made_group = [], False
    try:
        if subprocess.run(["getent", "group", GROUP], capture_output=True).returncode != 0:
            subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
            made_group = True
        for u in USERS:
            if subprocess.run(["id", u], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                u], check=True, capture_output=True)
                made.append(u)
        subprocess.run(["usermod", "-aG", GROUP, USERS[1]], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot create test users on this machine: {e}")
    yield {u: (pwd.getpwnam(u).pw_uid, pwd.getpwnam(u).pw_gid) for u in USERS}
    for u in made:
        subprocess.run(["userdel", u], capture_output=True)
    if made_group:
        subprocess.run(["groupdel", GROUP], capture_output=True)


def as_user(user: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
                           *argv], capture_output=True, text=True, timeout=timeout,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                               "PYTHONDONTWRITEBYTECODE": "1"})


def reads(user: str, *paths) -> list[str]:
    """For each path: "OK" if `user` can open and read it, else the errno name."""
    r = as_user(user, sys.executable, "-c", READER, *map(str, paths))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.fixture
def base():
    """A scratch directory every user may search (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="ckpt-trust-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def chown_tree(p: Path, uid: int, gid: int, dmode: int | None = None, fmode: int | None = None):
    for root, dirs, files in os.walk(p):
        os.chown(root, uid, gid)
        if dmode is not None:
            os.chmod(root, dmode)
        for f in files:
            os.chown(os.path.join(root, f), uid, gid, follow_symlinks=False)
            if fmode is not None:
                os.chmod(os.path.join(root, f), fmode)


# ------------------------------------------------------------------ symlinks


def test_symlink_to_root_only_file(users, base):
    """Issue #22 item 1: a user who can make a step in a mounted directory of steps links a
    shard to a root-only file; reading it through the mount must be refused to that user."""
    uid, gid = users[USERS[0]]
    secret = base / "secret"
    secret.mkdir(mode=0o700)
    shutil.copy(FIXTURES / "fsdp2_ws2" / "ckpt" / "__0_0.distcp", secret / "__0_0.distcp")
    os.chmod(secret / "__0_0.distcp", 0o600)
    blobs = base / "blobs"  # a hub-style blob store the user owns: links there must work
    blobs.mkdir()
    shutil.copy(FIXTURES / "fsdp2_ws1" / "ckpt" / "__0_0.distcp", blobs / "blob0")
    run = base / "run"
    run.mkdir()
    good = run / "step-100"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", good)
    (good / "__0_0.distcp").unlink()
    (good / "__0_0.distcp").symlink_to(blobs / "blob0")
    evil = run / "step-200"
    evil.mkdir()
    shutil.copy(FIXTURES / "fsdp2_ws2" / "ckpt" / ".metadata", evil / ".metadata")
    shutil.copy(FIXTURES / "fsdp2_ws2" / "ckpt" / "__1_0.distcp", evil / "__1_0.distcp")
    (evil / "__0_0.distcp").symlink_to(secret / "__0_0.distcp")
    chown_tree(blobs, uid, gid)
    chown_tree(good, uid, gid)
    chown_tree(evil, uid, gid)
    ref = Ref(FIXTURES / "fsdp2_ws2")
    m = Mount(run, "allow_other")
    try:
        assert os.readlink(m.dir / "latest") == "step-200"
        raw = m.dir / "latest" / ".raw" / "__0_0.distcp"
        tensors = [m.dir / "latest" / p for p in sorted(ref.tensors)]
        got = reads(USERS[0], raw, *tensors, m.dir / "latest" / ".safetensors" / "@all.safetensors")
        assert got[0] == "EACCES", got
        assert got[-1] == "EACCES", got
        # every tensor with a chunk in the linked shard is refused (fsdp2_ws2: rank 0 holds
        # the first half of every sharded tensor)
        refused = [p for p, g in zip(tensors, got[1:-1]) if g == "EACCES"]
        assert refused and all(g in ("OK", "EACCES") for g in got[1:-1]), got
        # the shown modes say so: no read bit for anyone but root on the raw file
        assert raw.stat().st_mode & 0o444 == 0, oct(raw.stat().st_mode)
        # root still reads it all, byte for byte
        assert raw.read_bytes() == (secret / "__0_0.distcp").read_bytes()
        for p, v in ref.tensors.items():
            assert (m.dir / "latest" / p).read_bytes() == v[2], p
        # a link to a file the user may read keeps working, for everyone
        ref1 = Ref(FIXTURES / "fsdp2_ws1")
        ok = [m.dir / "step-100" / p for p in sorted(ref1.tensors)]
        ok.append(m.dir / "step-100" / ".raw" / "__0_0.distcp")
        assert set(reads(USERS[0], *ok)) == {"OK"}
        assert set(reads(USERS[1], *ok)) == {"OK"}
    finally:
        m.close()


def test_symlinked_safetensors_to_root_only_file(users, base):
    """The same with HuggingFace storage: a `.safetensors` file linked to a root-only one."""
    uid, gid = users[USERS[0]]
    secret = base / "secret"
    secret.mkdir(mode=0o700)
    hf = base / "hf"
    shutil.copytree(FIXTURES / "hf_sharded" / "ckpt", hf)
    shards = sorted(hf.glob("*.safetensors"))
    victim = shards[0]
    shutil.move(victim, secret / victim.name)
    os.chmod(secret / victim.name, 0o600)
    victim.symlink_to(secret / victim.name)
    chown_tree(hf, uid, gid)
    ref = Ref(FIXTURES / "hf_sharded")
    m = Mount(hf, "allow_other")
    try:
        tensors = [m.dir / p for p in sorted(ref.tensors)]
        got = reads(USERS[0], m.dir / ".raw" / victim.name, m.dir / ".raw" / shards[1].name,
                    *tensors)
        assert got[:2] == ["EACCES", "OK"], got
        assert "EACCES" in got[2:] and "OK" in got[2:], got  # the victim's tensors only
        for p, v in ref.tensors.items():  # root reads everything
            assert (m.dir / p).read_bytes() == v[2], p
    finally:
        m.close()


def test_latest_tracker_symlink_is_not_followed(base):
    """`latest` must not tell the first line of a file elsewhere (a root-only one, say) to
    whoever may write a tracker into a directory of steps: a symlinked tracker is ignored."""
    secret = base / "secret"
    secret.mkdir(mode=0o700)
    (secret / "note").write_text("step-100\n")
    run = base / "run"
    run.mkdir()
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", run / "step-100")
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", run / "step-200")
    (run / "latest").symlink_to(secret / "note")
    m = Mount(run)
    try:
        assert os.readlink(m.dir / "latest") == "step-200"  # the highest step, as without it
    finally:
        m.close()


# ------------------------------------------------------------------ source permissions


def test_private_checkpoint(users, base):
    """Issue #22 item 2: a 0700 checkpoint of 0600 files is its owner's only."""
    uid, gid = users[USERS[0]]
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o700, fmode=0o600)
    ref = Ref(FIXTURES / "fsdp2_ws2")
    m = Mount(ck, "allow_other")
    try:
        files = [m.dir / p for p in sorted(ref.tensors)] + [m.dir / p for p in sorted(ref.objects)]
        files += [m.dir / ".npy" / (p + ".npy") for p in sorted(ref.tensors)]
        files += [m.dir / ".raw" / ".metadata", m.dir / ".raw" / "__0_0.distcp",
                  m.dir / ".safetensors" / "@all.safetensors",
                  m.dir / ".layout" / "dim0-of-2" / "1" / sorted(ref.tensors)[0]]
        assert set(reads(USERS[1], *files)) == {"EACCES"}
        assert set(reads(USERS[0], *files)) == {"OK"}
        # modes that tell the truth: the owner's, no group or other bits anywhere
        for root, dirs, fs in os.walk(m.dir):
            for n in dirs + fs:
                st = os.lstat(os.path.join(root, n))
                assert st.st_uid == uid and st.st_gid == gid, (root, n)
                assert st.st_mode & 0o077 == 0, (root, n, oct(st.st_mode))
        assert os.stat(m.dir).st_mode & 0o777 == 0o500
        assert os.stat(m.dir / sorted(ref.tensors)[0]).st_mode & 0o777 == 0o400
    finally:
        m.close()


def test_private_shards_public_metadata(users, base):
    """0600 shards beside a 0644 .metadata: others may list, not read tensors or values."""
    uid, gid = users[USERS[0]]
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o755, fmode=0o600)
    os.chmod(ck / ".metadata", 0o644)
    ref = Ref(FIXTURES / "fsdp2_ws2")
    m = Mount(ck, "allow_other")
    try:
        data = [m.dir / p for p in sorted(ref.tensors)]
        data += [m.dir / p for p in sorted(ref.objects)]  # values are stored in the shards
        assert set(reads(USERS[1], *data)) == {"EACCES"}
        assert reads(USERS[1], m.dir / ".raw" / ".metadata") == ["OK"]
        assert set(reads(USERS[0], *data)) == {"OK"}
        st = os.stat(data[0])
        assert st.st_mode & 0o777 == 0o400 and st.st_uid == uid
        assert os.stat(m.dir / ".raw" / ".metadata").st_mode & 0o777 == 0o444
    finally:
        m.close()


def test_group_readable_checkpoint(users, base):
    """0750/0640 with a group: a member through a supplementary group reads (the daemon
    checks with the caller's groups), a stranger does not, and modes show the group class."""
    uid, _ = users[USERS[0]]
    gid = grp.getgrnam(GROUP).gr_gid
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o750, fmode=0o640)
    ref = Ref(FIXTURES / "fsdp2_ws2")
    m = Mount(ck, "allow_other")
    try:
        files = [m.dir / p for p in sorted(ref.tensors)[:5]] + [m.dir / ".raw" / ".metadata"]
        assert set(reads(USERS[1], *files)) == {"OK"}  # in GROUP as a supplementary group
        assert set(reads("nobody", *files)) == {"EACCES"}
        st = os.stat(files[0])
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o440)
        assert os.stat(m.dir / "model").st_mode & 0o777 == 0o550
    finally:
        m.close()


def test_refused_after_chmod(users, base):
    """The open check asks at each open: a shard made private after mounting is refused
    although the kernel still holds the modes it had (0444) when it was listed."""
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    ref = Ref(FIXTURES / "fsdp2_ws1")
    m = Mount(ck, "allow_other")
    try:
        f = m.dir / sorted(ref.tensors)[0]
        assert os.stat(f).st_mode & 0o444 == 0o444
        assert reads(USERS[1], f) == ["OK"]
        os.chmod(ck / "__0_0.distcp", 0o600)
        assert reads(USERS[1], f) == ["EACCES"]
        assert f.read_bytes() == ref.tensors[sorted(ref.tensors)[0]][2]  # root still reads
    finally:
        m.close()


@pytest.fixture
def user_fuse(users):
    """Lets USERS[0] run a FUSE daemon with allow_other for one test: `user_allow_other` in
    /etc/fuse.conf and /dev/fuse open to that user (an ACL entry, else its group and 0660),
    both restored exactly afterwards, also on failure."""
    conf = Path("/etc/fuse.conf")
    old_conf = conf.read_bytes() if conf.exists() else None
    old_conf_st = conf.stat() if conf.exists() else None
    dev = "/dev/fuse"
    if not os.path.exists(dev):
        pytest.skip("no /dev/fuse on this machine")
    dst = os.stat(dev)
    getfacl = ["getfacl", "-p", dev] if shutil.which("getfacl") else None
    old_acl = subprocess.run(getfacl, capture_output=True).stdout if getfacl else None
    uid, gid = users[USERS[0]]
    acl = False
    try:
        lines = (old_conf or b"").decode().splitlines()
        if "user_allow_other" not in (x.strip() for x in lines):
            conf.write_text("\n".join(lines + ["user_allow_other"]) + "\n")
        if not os.access(dev, os.R_OK | os.W_OK) or (dst.st_mode & 0o006) != 0o006:
            if shutil.which("setfacl") and subprocess.run(
                    ["setfacl", "-m", f"u:{USERS[0]}:rw", dev], capture_output=True).returncode == 0:
                acl = True
            else:
                os.chown(dev, dst.st_uid, gid)
                os.chmod(dev, 0o660)
        yield uid, gid
    finally:
        if acl:
            subprocess.run(["setfacl", "-x", f"u:{USERS[0]}", dev], capture_output=True)
            if b"mask::" not in (old_acl or b""):
                subprocess.run(["setfacl", "-b", dev], capture_output=True)
        os.chown(dev, dst.st_uid, dst.st_gid)
        os.chmod(dev, dst.st_mode & 0o7777)
        if old_conf is None:
            conf.unlink(missing_ok=True)
        else:
            conf.write_bytes(old_conf)
            os.chmod(conf, old_conf_st.st_mode & 0o7777)
        assert (conf.read_bytes() if conf.exists() else None) == old_conf
        assert os.stat(dev).st_mode == dst.st_mode and os.stat(dev).st_uid == dst.st_uid \
            and os.stat(dev).st_gid == dst.st_gid
        if getfacl:
            assert subprocess.run(getfacl, capture_output=True).stdout == old_acl


def until(what, want, guard: float = 60):
    """what() polled until it equals want (a change the daemon sees at its next look at the
    sources); the deadline only guards against a hang, it bounds no speed."""
    deadline = time.monotonic() + guard
    while (got := what()) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def test_user_daemon(users, base, user_fuse):
    """A daemon run by an ordinary user (USERS[0]) with allow_other, on a real mount: another
    user (USERS[1]) reads through it only what they could read from the source files.  A
    0600 shard the daemon's user owns (readable by the daemon, not by the reader) shows no
    group/other bits and is refused to the reader while its owner and root read it — no
    escalation through the daemon's own rights; a shard the reader may read opens; a chmod
    after mounting and an ACL entry denying the reader are honoured at open (the daemon's
    own decision, past the kernel's cached modes), and access granted again is seen at a
    later open; a shard made root's 0600 is refused to the reader; owners shown are the
    sources'.  The test arranges what an ordinary user's allow_other needs (user_fuse:
    /etc/fuse.conf and /dev/fuse, restored after)."""
    uid, gid = user_fuse
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o755, fmode=0o644)
    os.chmod(ck / "__1_0.distcp", 0o600)
    mnt = base / "mnt"
    mnt.mkdir()
    os.chown(mnt, uid, gid)
    ref = Ref(FIXTURES / "fsdp2_ws2")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
                             BIN, "-f", "-o", "allow_other", "-o", "attr_timeout=0",
                             str(ck), str(mnt)], stderr=log)
    try:
        deadline = time.time() + 60  # a hang guard, not a speed bound
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, "no mount"
            time.sleep(0.05)
        raw0, raw1 = mnt / ".raw" / "__0_0.distcp", mnt / ".raw" / "__1_0.distcp"
        for f in (raw0, raw1):
            st = os.stat(f)
            assert (st.st_uid, st.st_gid) == (uid, gid), f
        assert os.stat(raw0).st_mode & 0o444 == 0o444
        assert os.stat(raw1).st_mode & 0o077 == 0, oct(os.stat(raw1).st_mode)
        assert reads(USERS[1], raw0, raw1) == ["OK", "EACCES"]
        assert reads(USERS[0], raw0, raw1) == ["OK", "OK"]
        assert raw1.read_bytes() == (ck / "__1_0.distcp").read_bytes()  # root
        # every tensor draws from both shards (FSDP2 over 2 ranks): refused to the reader
        f = mnt / sorted(ref.tensors)[0]
        assert reads(USERS[1], f) == ["EACCES"]
        assert reads(USERS[0], f) == ["OK"]
        assert f.read_bytes() == ref.tensors[sorted(ref.tensors)[0]][2]
        # opened up: the reader reads it; closed again by chmod, then by an ACL entry
        os.chmod(ck / "__1_0.distcp", 0o644)
        assert until(lambda: reads(USERS[1], raw1, f), ["OK", "OK"]) == ["OK", "OK"]
        os.chmod(ck / "__1_0.distcp", 0o600)  # refused at once: the daemon's check at open
        assert reads(USERS[1], raw1, f) == ["EACCES", "EACCES"]
        os.chmod(ck / "__1_0.distcp", 0o644)
        assert until(lambda: reads(USERS[1], raw1, f), ["OK", "OK"]) == ["OK", "OK"]
        if shutil.which("setfacl"):
            setfacl("-m", f"u:{USERS[1]}:---", str(ck / "__0_0.distcp"))
            assert reads(USERS[1], raw0, f) == ["EACCES", "EACCES"]
            assert reads(USERS[0], raw0, f) == ["OK", "OK"]
            setfacl("-b", str(ck / "__0_0.distcp"))
            assert until(lambda: reads(USERS[1], raw0, f), ["OK", "OK"]) == ["OK", "OK"]
        # made root's after mounting: refused to the reader (the daemon's own user may or may
        # not still read it, by its open fd, which it reaches anyway in /proc/PID/fd)
        os.chown(ck / "__1_0.distcp", 0, 0)
        os.chmod(ck / "__1_0.distcp", 0o600)
        assert reads(USERS[1], raw1, f) == ["EACCES", "EACCES"]
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        proc.wait(timeout=60)
        log.seek(0)
        text = log.read().decode(errors="replace")
        assert "Sanitizer" not in text and "runtime error:" not in text, text


def test_acl_denies_user(users, base):
    """An ACL entry refusing one user is honoured, whether present at mount (shown modes:
    owner only) or set afterwards (the daemon's faccessat as the caller evaluates it)."""
    if not shutil.which("setfacl"):
        pytest.skip("setfacl not installed (package acl)")
    uid, gid = users[USERS[0]]
    ref = Ref(FIXTURES / "fsdp2_ws1")
    for when in ("before", "after"):
        ck = base / when
        shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
        chown_tree(ck, uid, gid, dmode=0o755, fmode=0o644)
        deny = ["setfacl", "-m", f"u:{USERS[1]}:---", str(ck / "__0_0.distcp")]
        if when == "before":
            r = subprocess.run(deny, capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"this file system takes no ACLs: {r.stderr.strip()}")
        m = Mount(ck, "allow_other")
        try:
            f = m.dir / sorted(ref.tensors)[0]
            if when == "after":
                assert reads(USERS[1], f) == ["OK"]
                subprocess.run(deny, check=True)
            assert reads(USERS[1], f) == ["EACCES"], when
            assert reads(USERS[0], f) == ["OK"], when  # the owner; the ACL names USERS[1]
            assert f.read_bytes() == ref.tensors[sorted(ref.tensors)[0]][2]
        finally:
            m.close()


HASHER = r"""
import errno, hashlib, sys
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            print(hashlib.sha256(f.read()).hexdigest())
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
"""


def hashes(user: str, *paths) -> list[str]:
    """For each path: the sha256 of all `user` reads from it, else the errno name."""
    r = as_user(user, sys.executable, "-c", HASHER, *map(str, paths))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def sha(b: bytes) -> str:
    import hashlib
    return hashlib.sha256(b).hexdigest()


def shown_acl(path) -> list[tuple[int, int, int]] | None:
    """The ACL the mount shows (tag, perm, id), or None."""
    try:
        v = os.getxattr(path, "system.posix_acl_access")
    except OSError:
        return None
    assert struct.unpack_from("<I", v)[0] == 2 and (len(v) - 4) % 8 == 0
    return [struct.unpack_from("<HHI", v, 4 + 8 * i) for i in range((len(v) - 4) // 8)]


def kernel_grants(st: os.stat_result, acl, uid: int, groups: set[int], need: int) -> bool:
    """What the kernel decides from the shown mode and ACL (acl_permission_check)."""
    mode = st.st_mode
    if uid == st.st_uid:
        return (mode >> 6) & need == need
    if acl and mode & 0o070:
        mask = next((p for t, p, _ in acl if t == 0x10), 7)
        for t, p, i in acl:
            if t == 0x02 and i == uid:
                return p & mask & need == need
        found = False
        for t, p, i in acl:
            if (t == 0x04 and st.st_gid in groups) or (t == 0x08 and i in groups):
                found = True
                if p & mask & need == need:
                    return True
        return not found and (mode & need) == need
    if st.st_gid in groups:
        return (mode >> 3) & need == need
    return mode & need == need


def user_groups(user: str) -> set[int]:
    return set(os.getgrouplist(user, pwd.getpwnam(user).pw_gid))


def setfacl(*args: str) -> None:
    if not shutil.which("setfacl"):
        pytest.skip("setfacl not installed (package acl)")
    r = subprocess.run(["setfacl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"this file system takes no ACLs: {r.stderr.strip()}")


def test_acl_only_grant(users, base):
    """Issue #22, ACL-only grants: a user whom only ACL entries let in (u:B:r on the files,
    u:B:rx on the directory; not the owner, not in its group, no other bits) reads through
    the mount bit for bit what they may read from the sources; a user named without r on the
    shard is refused its tensors and values (yet reads the metadata its entry grants); a
    stranger nothing; and what `stat` and the ACL shown through the mount grant is, for each
    of them and each file, exactly what the open does (no grant shown that is refused)."""
    uid, gid = users[USERS[0]]
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o750, fmode=0o640)
    files = sorted(str(p) for p in ck.iterdir())
    setfacl("-m", f"u:{USERS[1]}:r", *files)
    setfacl("-m", f"u:{USERS[1]}:rx,u:nobody:rx", str(ck))
    setfacl("-m", "u:nobody:r", str(ck / ".metadata"))
    setfacl("-m", "u:nobody:-", str(ck / "__0_0.distcp"))
    ref = Ref(FIXTURES / "fsdp2_ws1")
    m = Mount(ck, "allow_other")
    try:
        tensors = sorted(ref.tensors)
        paths = [m.dir / p for p in tensors] + [m.dir / p for p in sorted(ref.objects)]
        got = hashes(USERS[1], *paths)
        want = [sha(ref.tensors[p][2]) for p in tensors]
        assert got[:len(tensors)] == want  # bit-exact
        assert "EACCES" not in got
        assert hashes(USERS[1], m.dir / ".raw" / "__0_0.distcp") == [
            sha((ck / "__0_0.distcp").read_bytes())]
        assert set(hashes("nobody", *paths)) == {"EACCES"}
        assert hashes("nobody", m.dir / ".raw" / ".metadata") == [
            sha((ck / ".metadata").read_bytes())]
        # what is shown is what the open does, for every user and file
        sample = [m.dir, m.dir / "model", m.dir / ".raw", m.dir / ".raw" / ".metadata",
                  m.dir / ".raw" / "__0_0.distcp", m.dir / ".npy" / (tensors[0] + ".npy"),
                  m.dir / ".safetensors" / "@all.safetensors", *paths[:3], paths[-1]]
        for user in (USERS[0], USERS[1], "nobody", USERS[0]):
            u = pwd.getpwnam(user).pw_uid
            opened = reads(user, *[p for p in sample if not p.is_dir()])
            files_ = iter(opened)
            for p in sample:
                st, acl = os.stat(p), shown_acl(p)
                shown = kernel_grants(st, acl, u, user_groups(user), 5 if p.is_dir() else 4)
                if p.is_dir():
                    r = as_user(user, "ls", str(p))
                    assert (r.returncode == 0) == shown, (user, p, r.stderr, acl)
                else:
                    assert (next(files_) == "OK") == shown, (user, p, oct(st.st_mode), acl)
        acl = shown_acl(m.dir / tensors[0])
        b, n = pwd.getpwnam(USERS[1]).pw_uid, pwd.getpwnam("nobody").pw_uid
        assert (0x02, 4, b) in acl and (0x02, 0, n) in acl, acl
        assert os.stat(m.dir / tensors[0]).st_mode & 0o777 == 0o440  # r--, mask r--, ---
        g = subprocess.run(["getfacl", "-n", str(m.dir / tensors[0])], capture_output=True,
                           text=True).stdout
        assert f"user:{b}:r--" in g and f"user:{n}:---" in g, g
    finally:
        m.close()


def test_acl_mask_refuses(users, base):
    """A mask without r takes an ACL entry's grant away (the kernel then ignores the ACL:
    group bits 0), so the named user is refused, shown no grant, and the owner still reads."""
    uid, gid = users[USERS[0]]
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    chown_tree(ck, uid, gid, dmode=0o750, fmode=0o640)
    files = sorted(str(p) for p in ck.iterdir())
    setfacl("-m", f"u:{USERS[1]}:r", *files)
    setfacl("-m", f"u:{USERS[1]}:rx", str(ck))
    setfacl("-m", "m::-", str(ck / "__0_0.distcp"))
    ref = Ref(FIXTURES / "fsdp2_ws1")
    m = Mount(ck, "allow_other")
    try:
        f = m.dir / sorted(ref.tensors)[0]
        assert reads(USERS[1], f, m.dir / ".raw" / ".metadata") == ["EACCES", "OK"]
        assert reads(USERS[0], f) == ["OK"]
        acl = shown_acl(f)
        b = pwd.getpwnam(USERS[1]).pw_uid
        assert not acl or (0x02, 4, b) not in acl, acl
        assert not kernel_grants(os.stat(f), acl, b, user_groups(USERS[1]), 4)
    finally:
        m.close()


def test_modes_follow_sources(users, base):
    """Issue #22, modes taken at indexing: a chmod of a shard after mounting shows through
    `stat` once the attribute timeout passes (here 1 s; the daemon reads the sources again
    at most once a second), and the chmod back restores the bits; likewise an ACL set later
    (`-o acl`: a checkpoint that needs no ACL at mount is mounted without them).  How soon
    is not asserted (a hang guard only: speed is for benchmarks); that it follows is."""
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    ref = Ref(FIXTURES / "fsdp2_ws1")
    m = Mount(ck, "allow_other", "attr_timeout=1", "acl")
    try:
        f = m.dir / sorted(ref.tensors)[0]

        def settles(want, what) -> None:
            got = until(lambda: os.stat(f).st_mode & 0o777, want)
            assert got == want, (what, oct(got))

        assert os.stat(f).st_mode & 0o777 == 0o444
        os.chmod(ck / "__0_0.distcp", 0o600)
        settles(0o400, "chmod go-r")
        assert reads(USERS[1], f) == ["EACCES"]
        os.chmod(ck / "__0_0.distcp", 0o644)
        settles(0o444, "chmod back")
        assert reads(USERS[1], f) == ["OK"]
        os.chmod(ck / "__0_0.distcp", 0o640)
        settles(0o440, "chmod o-r")
        setfacl("-m", f"u:{USERS[1]}:r", str(ck / "__0_0.distcp"))
        b = pwd.getpwnam(USERS[1]).pw_uid

        def has_b() -> bool:
            os.stat(f)  # (the kernel drops a cached ACL with the attributes)
            return (0x02, 4, b) in (shown_acl(f) or [])

        assert until(has_b, True), shown_acl(f)
        assert reads(USERS[1], f) == ["OK"]
    finally:
        m.close()


def test_acl_set_later_without_acl_support(users, base):
    """A checkpoint needing no ACL at mount is mounted without the kernel's ACL evaluation;
    an ACL refusing one user set afterwards then takes the read bit from every class that
    user may be in (plain modes can name nobody): never a grant shown that is refused."""
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    ref = Ref(FIXTURES / "fsdp2_ws1")
    m = Mount(ck, "allow_other", "attr_timeout=1")
    try:
        f = m.dir / sorted(ref.tensors)[0]
        assert os.stat(f).st_mode & 0o777 == 0o444 and shown_acl(f) is None
        setfacl("-m", f"u:{USERS[1]}:-", str(ck / "__0_0.distcp"))
        got = until(lambda: os.stat(f).st_mode & 0o777, 0o400)  # (a hang guard, no speed)
        assert got == 0o400, oct(got)
        assert reads(USERS[1], f) == ["EACCES"]
        # the price of plain modes: a user the ACL does not name is refused too
        assert reads(USERS[0], f) == ["EACCES"]
        assert f.read_bytes() == ref.tensors[sorted(ref.tensors)[0]][2]  # the owner (root)
        assert shown_acl(f) is None
    finally:
        m.close()


# ------------------------------------------------------------------ FIFOs


def unblock(fifo: Path) -> None:
    """Releases a reader stuck opening fifo (an unfixed daemon), so cleanup can unmount."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def run_or_unblock(argv, fifo: Path, timeout: float = 20) -> subprocess.CompletedProcess:
    """Runs argv; if it hangs (an unfixed build), releases the FIFO so that it can end, and
    fails.  (subprocess.run would wait forever for a child stuck in the kernel.)"""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        unblock(fifo)
        p.kill()
        p.communicate()
        pytest.fail(f"{' '.join(map(str, argv))} hangs on a FIFO shard")
    assert not any(m in err for m in SANITIZER_MARKERS), err
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def test_fifo_shard_does_not_hang(base):
    run = base / "run"
    run.mkdir()
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", run / "step-100")
    bad = run / "step-200"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", bad)
    (bad / "__1_0.distcp").unlink()
    os.mkfifo(bad / "__1_0.distcp")
    m = Mount(run)
    try:
        for argv in (["ls", str(m.dir / "step-200")], ["stat", str(m.dir / "step-200" / "model")]):
            r = run_or_unblock(argv, bad / "__1_0.distcp")
            assert r.returncode != 0, r.stdout
        assert "__1_0.distcp" in m.log() and "not a regular file" in m.log(), m.log()
        ref1 = Ref(FIXTURES / "fsdp2_ws1")
        for p, v in ref1.tensors.items():
            assert (m.dir / "step-100" / p).read_bytes() == v[2], p
    finally:
        unblock(bad / "__1_0.distcp")
        m.close()
    # a single checkpoint with a FIFO shard: refused at mount, naming the file
    mnt = Path(tempfile.mkdtemp(prefix="ckptfs-mnt-"))
    try:
        r = run_or_unblock([BIN, "-f", str(bad), str(mnt)], bad / "__1_0.distcp", 30)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        os.rmdir(mnt)
    assert r.returncode != 0 and "__1_0.distcp" in r.stderr, r.stderr


def test_raw_shows_every_regular_file(users, base):
    """Issue #23 item 6: `.raw/` shows every regular file of the checkpoint directory (a
    framework's config.json, common.pt, ...) so a copy through it loads; each keeps its own
    permissions and is a source of nothing else; subdirectories are shown with every regular
    file below them (a symbolic link there is not followed), and a FIFO or a link to a device
    is never opened (logged, no hang)."""
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", ck)
    own = sorted(os.listdir(ck))
    (ck / "config.json").write_text('{"hidden_size": 6}\n')
    (ck / "common.pt").write_bytes(os.urandom(3000))
    (ck / "secret.txt").write_text("root only\n")
    os.chmod(ck / "secret.txt", 0o600)
    (ck / "sub").mkdir()
    (ck / "sub" / "x").write_text("x")
    (ck / "sub" / "deeper").mkdir()
    (ck / "sub" / "deeper" / "y").write_text("yy")
    os.chmod(ck / "sub" / "deeper", 0o700)
    os.symlink("../config.json", ck / "sub" / "link.json")
    os.mkfifo(ck / "sub" / "pipe")
    os.mkfifo(ck / "pipe")
    os.symlink("config.json", ck / "link.json")
    os.symlink("/dev/zero", ck / "zero")
    deep = ck / "deep"  # 33 levels: the 32 of TREE_RAW_DEPTH_MAX shown, not the last
    for k in range(1, 34):
        deep = deep / f"d{k}" if k > 1 else deep
        deep.mkdir()
        (deep / "f").write_text(str(k))
    watch = _OpenWatch([ck / "pipe", ck / "sub" / "pipe"])  # nothing may open the FIFOs
    m = Mount(ck, "allow_other")
    try:
        r = run_or_unblock(["ls", "-A", str(m.dir / ".raw")], ck / "pipe")
        assert r.returncode == 0, r.stderr
        want = sorted(own + ["config.json", "common.pt", "secret.txt", "link.json", "sub",
                             "deep"])
        assert sorted(r.stdout.split()) == want, r.stdout
        shown = m.dir / ".raw" / "deep"
        for k in range(2, 33):
            shown = shown / f"d{k}"
        assert (shown / "f").read_text() == "32" and os.listdir(shown) == ["f"], \
            os.listdir(shown)
        assert watch.opened() == [], watch.opened()
        for n in want:
            if n not in ("sub", "deep"):
                assert (m.dir / ".raw" / n).read_bytes() == (ck / n).read_bytes(), n
        assert sorted(os.listdir(m.dir / ".raw" / "sub")) == ["deeper", "x"]
        assert (m.dir / ".raw" / "sub" / "x").read_text() == "x"
        assert (m.dir / ".raw" / "sub" / "deeper" / "y").read_text() == "yy"
        assert os.stat(m.dir / ".raw" / "sub" / "deeper").st_mode & 0o077 == 0
        assert reads(USERS[0], m.dir / ".raw" / "sub" / "x",
                     m.dir / ".raw" / "sub" / "deeper" / "y") == ["OK", "EACCES"]
        log = m.log()
        assert "sub/link.json: not shown under .raw: a symbolic link" in log, log
        assert "sub/pipe: not shown under .raw: not a regular file" in log, log
        assert "pipe: not shown under .raw: not a regular file" in log, log
        assert "zero: not shown under .raw: not a regular file" in log, log
        assert os.stat(m.dir / ".raw" / "secret.txt").st_mode & 0o077 == 0
        assert os.stat(m.dir / ".raw" / "config.json").st_mode & 0o004
        tensor = m.dir / next(iter(Ref(FIXTURES / "fsdp2_ws2").tensors))
        assert reads(USERS[0], m.dir / ".raw" / "config.json", m.dir / ".raw" / "secret.txt",
                     tensor) == ["OK", "EACCES", "OK"]
    finally:
        watch.close()
        unblock(ck / "pipe")
        unblock(ck / "sub" / "pipe")
        m.close()


class _OpenWatch:
    """inotify IN_OPEN watches on some paths: which of them anything opened since."""

    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, paths):
        import ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, ctypes.get_errno()
        self.wd = {}
        for p in paths:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(p), self.IN_OPEN)
            assert wd >= 0, (p, ctypes.get_errno())
            self.wd[wd] = str(p)

    def opened(self):
        seen = []
        try:
            buf = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return seen
        off = 0
        while off + 16 <= len(buf):
            wd, mask, _, n = struct.unpack_from("iIII", buf, off)
            if mask & self.IN_OPEN:
                seen.append(self.wd.get(wd, wd))
            off += 16 + n
        return seen

    def close(self):
        os.close(self.fd)


@pytest.mark.skipif(not CLI, reason="CKPT_BIN is not set")
@pytest.mark.parametrize("cmd", ["cat", "export", "verify", "ls"])
def test_fifo_shard_cli(base, cmd):
    """The CLI opens shards without blocking too: commands that read a FIFO shard fail
    naming it (cat and export hung before), and ls (metadata only) still lists."""
    bad = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", bad)
    (bad / "__1_0.distcp").unlink()
    os.mkfifo(bad / "__1_0.distcp")
    argv = {"cat": [CLI, "cat", str(bad), "model.output.weight"],
            "export": [CLI, "export", str(bad), str(base / "out.safetensors")],
            "verify": [CLI, "verify", str(bad)], "ls": [CLI, "ls", str(bad)]}[cmd]
    r = run_or_unblock(argv, bad / "__1_0.distcp")
    if cmd == "ls":
        assert r.returncode == 0 and "model" in r.stdout, r.stderr
    else:
        assert r.returncode != 0, r.stdout
        assert "__1_0.distcp" in r.stdout + r.stderr, r.stdout + r.stderr


# ------------------------------------------------------------------ messages


def test_no_bytes_of_a_non_safetensors_file_in_messages(base):
    secret = base / "secret"
    secret.mkdir(mode=0o700)
    payload = b"Pa55w0rd" + b"-top-secret-" * 8
    (secret / "key").write_bytes(payload)
    os.chmod(secret / "key", 0o600)
    hf = base / "hf"
    shutil.copytree(FIXTURES / "hf_sharded" / "ckpt", hf)
    victim = sorted(hf.glob("*.safetensors"))[0]
    victim.unlink()
    victim.symlink_to(secret / "key")
    leaked = [str(struct.unpack("<Q", payload[:8])[0]), hex(struct.unpack("<Q", payload[:8])[0]),
              "Pa55w0rd", payload[:8].hex()]
    outs = []
    mnt = Path(tempfile.mkdtemp(prefix="ckptfs-mnt-"))
    try:
        r = subprocess.run([BIN, "-f", str(hf), str(mnt)], capture_output=True, text=True,
                           timeout=30)
        outs.append(r.stderr)
        assert r.returncode != 0
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)])
        os.rmdir(mnt)
    if CLI:
        for cmd in (["ls"], ["info"], ["verify"]):
            r = subprocess.run([CLI, *cmd, str(hf)], capture_output=True, text=True, timeout=30)
            outs.append(r.stdout + r.stderr)
    text = "\n".join(outs)
    assert not any(m in text for m in SANITIZER_MARKERS), text
    assert victim.name in text, text  # the message still names the file
    for s in leaked:
        assert s not in text, (s, text)


def test_no_bytes_of_a_non_pickle_metadata_in_messages(base):
    """The same for a `.metadata` that is no pickle: the decoder's messages (opcode bytes,
    argument lengths read from the file) are not reached."""
    secret = base / "secret"
    secret.mkdir(mode=0o700)
    payload = b"Pa55w0rd" + b"-top-secret-" * 8
    (secret / "key").write_bytes(payload)
    ck = base / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", ck)
    (ck / ".metadata").unlink()
    (ck / ".metadata").symlink_to(secret / "key")
    mnt = Path(tempfile.mkdtemp(prefix="ckptfs-mnt-"))
    try:
        r = subprocess.run([BIN, "-f", str(ck), str(mnt)], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode != 0
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)])
        os.rmdir(mnt)
    text = r.stderr
    if CLI:
        for cmd in (["ls"], ["dump-metadata"]):
            c = subprocess.run([CLI, *cmd, str(ck)], capture_output=True, text=True, timeout=30)
            text += c.stdout + c.stderr
    assert not any(m in text for m in SANITIZER_MARKERS), text
    assert ".metadata" in text and "not a pickle" in text, text
    assert "opcode" not in text and "0x50" not in text and "Pa55" not in text, text


# ------------------------------------------------------------------ value sizes


def test_value_sizes_visible_by_stat(tmp_path):
    """Issue #22, value sizes: a non-tensor value's file shows its text's real byte count in
    `stat` (st_size), so readers that trust it (`cp`, Python's `open().read()`, reading
    st_size bytes) get the whole text — also for a value whose text is larger than one read
    request — and it equals `ckpt cat --text`; a value over the render budget (a pickle of
    shared references that would render to 2^26 elements) shows size 0 and reads as EIO."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    ck = tmp_path / "ck"
    x = (1,)
    for _ in range(26):  # (a tuple: dcp.save walks into lists)
        x = (x, x)
    sd = {"w": torch.arange(6, dtype=torch.float32),
          "v": {"lr": 0.01, "betas": (0.9, 0.999), "name": "é" * 10,
                "big": "x" * 1_500_000 + "é", "ints": list(range(300_000)),
                "huge": x}}
    dcp.save(sd, checkpoint_id=str(ck))
    m = Mount(ck)
    try:
        for key in ("lr", "betas", "name", "big", "ints"):
            p = m.dir / "v" / key
            size = os.stat(p).st_size
            data = p.read_bytes()
            assert size == len(data) > 0, key
            assert data.decode() == repr(sd["v"][key]) + "\n", key
            with open(p, "rb") as f:  # exactly st_size bytes, then EOF
                assert f.read(size) == data and f.read(1) == b"", key
            subprocess.run(["cp", str(p), str(tmp_path / "copy")], check=True)
            assert (tmp_path / "copy").read_bytes() == data, key
            if CLI:
                out = subprocess.run([CLI, "cat", "--text", str(ck), f"v/{key}"],
                                     capture_output=True, check=True).stdout
                assert out == data, key
        p = m.dir / "v" / "huge"
        assert os.stat(p).st_size == 0
        with pytest.raises(OSError) as e:
            p.read_bytes()
        assert e.value.errno == 5
    finally:
        m.close(expect_clean=False)


# ------------------------------------------------------------------ memory of rendered values


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class _RssSampled:
    """The daemon's VmRSS sampled every `every` seconds while a `with` block runs: `.peak`,
    the samples, from `first` (its RSS before) on."""

    def __init__(self, pid: int, first: int, every: float):
        import threading
        self.peak, self._stop = [first], threading.Event()

        def sample():
            while not self._stop.is_set():
                self.peak.append(_status_kib(pid, "VmRSS"))
                time.sleep(every)
        self._mon = threading.Thread(target=sample)

    def __enter__(self):
        self._mon.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._mon.join()


VALUES_N, VALUES_MIB, VALUES_BUDGET_MIB, VALUES_THREADS = 60, 3, 24, 8


def test_value_texts_bounded_by_value_cache(tmp_path):
    """Issue #22, daemon memory: rendered value texts are kept within `-o value_cache` (the
    least recently used dropped and rendered again when read), so the daemon's memory does
    not grow with the values read.  A checkpoint written by torch (dcp.save, no_dist) holds
    60 string values of 3 MiB of text each (180 MiB in all, over 7x the 24 MiB budget: 8 MiB
    would make every render wait for all others, a budget below one render's need); 8
    threads read every value file whole, twice in random order (every text dropped and
    rendered again, while other threads read it), each read bit-exact against
    `ckpt cat --text`; st_size stays the text's length.  The daemon's peak RSS (VmHWM) above
    its RSS at mount (before the first stat) stays under what the budget allows: the budget,
    the renders in flight (4, each the value, its text growing and the copy with its newline: 4 texts), the
    texts being copied from (one per reader thread) and 32 MiB of the daemon's own — 128
    MiB (a loose bound since one total holds them: test_value_memory_one_bound is the tight
    one), where keeping every text takes 180 more (the test fails so with eviction disabled:
    198 MiB grown)."""
    torch = pytest.importorskip("torch")
    import random
    import threading
    import torch.distributed.checkpoint as dcp
    ck = tmp_path / "ck"
    n = VALUES_MIB << 20
    vals = {}
    for i in range(VALUES_N):
        unit = f"value {i:02d} ".encode() + bytes(range(97, 123))  # distinct per value
        vals[f"k{i:02d}"] = (unit * (n // len(unit) + 1))[:n - 2].decode()  # repr: + 2 quotes
    dcp.save({"w": torch.arange(4, dtype=torch.float32), "vals": vals},
             checkpoint_id=str(ck), no_dist=True)
    want = {}
    for key in vals:
        want[key] = subprocess.run([CLI, "cat", "--text", str(ck), f"vals/{key}"],
                                   capture_output=True, check=True).stdout
        assert want[key] == (repr(vals[key]) + "\n").encode(), key  # the reference itself
    del vals
    m = Mount(ck, f"value_cache={VALUES_BUDGET_MIB}M")
    try:
        pid = m.proc.pid
        base = _status_kib(pid, "VmRSS")
        for key in want:  # sizes by stat (each rendered to learn it), before any read
            assert os.stat(m.dir / "vals" / key).st_size == len(want[key]), key
        bad, errors = [], []

        def reader(seed: int):
            rng = random.Random(seed)
            try:
                for _ in range(2):
                    keys = list(want)
                    rng.shuffle(keys)
                    for key in keys:
                        data = (m.dir / "vals" / key).read_bytes()
                        if data != want[key]:
                            bad.append(key)
            except OSError as e:
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(VALUES_THREADS)]
        with _RssSampled(pid, base, 0.02) as rss:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        peak = rss.peak
        hwm = _status_kib(pid, "VmHWM")
        assert not errors and not bad, (errors, sorted(set(bad)))
        for key in want:
            assert os.stat(m.dir / "vals" / key).st_size == len(want[key]), key
        own = 32  # MiB: the daemon's own working set (threads, reply buffers, libraries)
        bound = (own + VALUES_BUDGET_MIB + 4 * 4 * VALUES_MIB + VALUES_THREADS * VALUES_MIB) << 10
        grown = max(hwm, max(peak)) - base
        print(f"daemon RSS before {base} KiB, peak {max(peak)} KiB, VmHWM {hwm} KiB, "
              f"grown {grown} KiB, bound {bound} KiB")
        # (AddressSanitizer's quarantine holds freed memory: there only the bytes count)
        if "libasan" not in Path(f"/proc/{pid}/maps").read_text():
            assert grown <= bound, (base, max(peak), hwm, bound)
    finally:
        m.close()


WORST_N, WORST_MIB, WORST_THREADS = 16, 15.9, 16


def test_value_memory_one_bound(tmp_path):
    """Issue #22, daemon memory <= 256 MB whatever the values: `-o value_cache` (default 64
    MiB) bounds one total, the texts kept, the texts readers are copying from and the renders
    in flight.  The worst case: 16 values of nearly the 16 MiB render budget each (strings
    written by torch's dcp.save), 16 threads at once each stat-ing and reading its own value
    at random offsets, every byte checked against repr().  The daemon's peak RSS (VmHWM)
    above its RSS at mount stays within the default budget plus 32 MiB of its own; before
    (texts held by readers and up to 4 renders in flight outside the budget, each thread's
    malloc arena keeping what it freed) main's daemon grew 160 MiB here and fails (341 MiB
    reading the files whole)."""
    torch = pytest.importorskip("torch")
    import random
    import threading
    import torch.distributed.checkpoint as dcp
    ck = tmp_path / "ck"
    n = int(WORST_MIB * (1 << 20))
    vals = {}
    for i in range(WORST_N):
        unit = f"value {i:02d} ".encode() + bytes(range(97, 123))
        vals[f"k{i:02d}"] = (unit * (n // len(unit) + 1))[:n - 3].decode()
    dcp.save({"w": torch.arange(4, dtype=torch.float32), "vals": vals},
             checkpoint_id=str(ck), no_dist=True)
    want = {k: (repr(v) + "\n").encode() for k, v in vals.items()}
    del vals
    m = Mount(ck)
    try:
        pid = m.proc.pid
        base = _status_kib(pid, "VmRSS")
        start, bad, errors = threading.Barrier(WORST_N), [], []

        def reader(key: str, seed: int):
            rng = random.Random(seed)
            w = want[key]
            try:
                start.wait()
                p = m.dir / "vals" / key
                if os.stat(p).st_size != len(w):
                    bad.append((key, "size"))
                fd = os.open(p, os.O_RDONLY)
                try:
                    for _ in range(3):
                        off = rng.randrange(len(w))
                        if os.pread(fd, 65536, off) != w[off:off + 65536]:
                            bad.append((key, off))
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k, s)) for s, k in enumerate(want)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        hwm = _status_kib(pid, "VmHWM")
        assert not errors and not bad, (errors, bad)
        grown = hwm - base
        bound = (64 + 32) << 10
        print(f"daemon RSS at mount {base} KiB, VmHWM {hwm} KiB, grown {grown} KiB, "
              f"bound {bound} KiB")
        if "libasan" not in Path(f"/proc/{pid}/maps").read_text():
            assert grown <= bound and hwm <= 256 << 10, (base, hwm, bound)
    finally:
        m.close()


INTS_N, INTS_VALUES, INTS_THREADS = 2_000_000, 2, 4


def test_value_decode_memory_bounded(tmp_path):
    """Issue #22, daemon memory <= 256 MB whatever the values: a value whose decoded form is
    far larger than its pickle (a list of 2 M small ints torch's dcp.save pickles into 4 MB,
    2 bytes an int, which decodes into ~180 MB, a whole value an int) is decoded within a
    budget drawn from `-o value_cache` (the render's reservation), so its reads fail with EIO,
    the daemon's log naming the key and the budget, instead of the daemon growing by the
    decoded size (main: 222 MiB here; the texts, 7.8 MB each, fit the render budget, so main
    read them).  Lookups and stat never fail (size 0, as for a value over the render budget);
    another value and a tensor of the same checkpoint read right; 4 threads read each value at
    once.  `ckpt cat --text` reads it (its own budget, 1G by default) and refuses it under
    `--max-memory 16M`, naming the key and the budget."""
    torch = pytest.importorskip("torch")
    import threading
    import torch.distributed.checkpoint as dcp
    ck = tmp_path / "ck"
    state = {"w": torch.arange(4, dtype=torch.float32), "cfg": {"betas": (0.9, 0.99)},
             "ints": {f"i{k}": [(j + k) % 100 for j in range(INTS_N)] for k in range(INTS_VALUES)}}
    dcp.save(state, checkpoint_id=str(ck), no_dist=True)
    stored = sum(p.stat().st_size for p in ck.glob("*.distcp"))
    assert stored < 6 * INTS_VALUES << 20, stored  # the pickles stay small
    want = {k: (repr(v) + "\n").encode() for k, v in state["ints"].items()}
    cfg_text = (repr(state["cfg"]["betas"]) + "\n").encode()  # (dicts are directories)
    w_bytes = state["w"].numpy().tobytes()
    del state
    m = Mount(ck)
    try:
        pid = m.proc.pid
        base = _status_kib(pid, "VmRSS")
        names = sorted(os.listdir(m.dir / "ints"))  # lookups never decode
        assert names == sorted(want), names
        got, errors = [], []

        def reader(name: str):
            try:
                got.append((name, (m.dir / "ints" / name).read_bytes()))
            except OSError as e:
                errors.append((name, e.errno))

        threads = [threading.Thread(target=reader, args=(n,))
                   for n in names for _ in range(INTS_THREADS)]
        with _RssSampled(pid, base, 0.01) as rss:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        peak = rss.peak
        hwm = _status_kib(pid, "VmHWM")
        grown = max(hwm, max(peak)) - base
        bound = (64 + 32) << 10
        print(f"daemon RSS at mount {base} KiB, peak {max(peak)} KiB, VmHWM {hwm} KiB, "
              f"grown {grown} KiB, bound {bound} KiB, {len(errors)} EIO, {len(got)} texts")
        # (AddressSanitizer's quarantine holds freed memory: there only the replies count)
        if "libasan" not in Path(f"/proc/{pid}/maps").read_text():
            assert grown <= bound and hwm <= 256 << 10, (base, max(peak), hwm, bound)
        assert len(errors) + len(got) == len(threads)
        for name, data in got:  # a text that fits is the list's repr
            assert data == want[name], name
        assert all(e == errno.EIO for _, e in errors), errors
        refused = {name for name, _ in errors}
        # (deterministic: ~180 MB decoded each against a 48 MiB cap; the budget off, every
        # read would get its text)
        assert refused == set(names), (refused, names)
        for name in names:
            size = os.stat(m.dir / "ints" / name).st_size
            assert size == (0 if name in refused else len(want[name])), (name, size)
        # the other entries of the checkpoint read right, after and beside the refused ones
        assert (m.dir / "cfg" / "betas").read_bytes() == cfg_text
        assert (m.dir / "w").read_bytes() == w_bytes
        log = m.log()
        for name in refused:
            assert f"'ints.{name}'" in log, log[-2000:]
        if refused:
            assert "memory budget of" in log and "value_cache" in log, log[-2000:]
        # the .torch/ view lays its archives out decoding the values within what the value
        # cache sets aside for one decode: the lists are left out (logged), the rest loads
        with _RssSampled(pid, base, 0.01) as rss:
            tv = m.dir / ".torch"
            sizes = {p.name: p.stat().st_size for p in tv.iterdir()}
            assert sizes and all(sizes.values()), sizes
            sd = torch.load(tv / "@all.pt", weights_only=True)
        peak = rss.peak
        hwm = _status_kib(pid, "VmHWM")
        grown = max(hwm, max(peak)) - base
        print(f".torch/: peak {max(peak)} KiB, VmHWM {hwm} KiB, grown {grown} KiB")
        if "libasan" not in Path(f"/proc/{pid}/maps").read_text():
            assert grown <= bound and hwm <= 256 << 10, (base, max(peak), hwm, bound)
        assert torch.equal(sd["w"], torch.frombuffer(bytearray(w_bytes), dtype=torch.float32))
        assert sd["cfg"]["betas"] == (0.9, 0.99) and "ints" not in sd, sorted(sd)
        log = m.log()
        for name in names:
            assert f"'ints/{name}' left out" in log, log[-2000:]
    finally:
        m.close()
    name = names[0]
    out = subprocess.run([CLI, "cat", "--text", str(ck), f"ints/{name}"], capture_output=True)
    assert out.returncode == 0 and out.stdout == want[name], out.stderr
    out = subprocess.run([CLI, "cat", "--text", "--max-memory", "16M", str(ck), f"ints/{name}"],
                         capture_output=True)
    assert out.returncode == 1 and not out.stdout, out
    assert (f"'ints.{name}'".encode() in out.stderr
            and b"memory budget of 16777216 bytes" in out.stderr), out.stderr
