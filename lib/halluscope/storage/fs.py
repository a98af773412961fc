"""One way to reach storage: an fsspec filesystem built from a URL and a StorageSpec."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import stat
import uuid
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.asyn import AsyncFileSystem
from fsspec.compression import compr
from fsspec.exceptions import FSTimeoutError
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import infer_compression

from halluscope.errors import ConfigError, StorageError, StorageFull

if TYPE_CHECKING:  # storage sits below config: it reads a spec's fields, never builds one
    from halluscope.storage.spec import StorageSpec

logger = logging.getLogger(__name__)

# Set in a pod by EKS for IRSA (a projected service-account token botocore exchanges for role
# credentials) and for EKS Pod Identity (a local credentials endpoint). botocore's default chain
# reads them; an instance profile (IMDS) announces itself by no variable.
CREDENTIAL_CHAIN_ENV = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
_CREDENTIAL_FIELDS = (("access_key_env", "key"), ("secret_key_env", "secret"))
_chain_logged: set[tuple[str, ...]] = set()


def _one_line(err: BaseException, limit: int = 300) -> str:
    """An exception's text as one line of at most ``limit`` characters (botocore's span several)."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else f"{text[:limit]}..."


def _static_keys(spec: StorageSpec) -> dict:
    """key/secret from the variables the spec names, or {} for botocore's default chain.

    Both named and set: those keys. None named: the chain. Named but unset (or empty, as a Secret
    copied from secrets.example.env unfilled gives): the chain when the pod has web-identity or
    container credentials (a manifest that mounts the key Secret optionally, run under IRSA or
    Pod Identity), else a ConfigError naming the field."""
    named = [(field, opt, getattr(spec, field)) for field, opt in _CREDENTIAL_FIELDS if getattr(spec, field)]
    missing = [(field, env) for field, _, env in named if not os.environ.get(env)]
    if not missing:
        return {opt: os.environ[env] for _, opt, env in named}
    chain = [v for v in CREDENTIAL_CHAIN_ENV if os.environ.get(v)]
    if not chain:
        field, env = missing[0]
        raise ConfigError(f"storage.{field}: environment variable {env} is not set, and no web-identity or "
                          f"container credentials are (none of {', '.join(CREDENTIAL_CHAIN_ENV)})")
    unset = tuple(env for _, env in missing)
    if unset not in _chain_logged:  # once per process: every Location of a run builds options
        _chain_logged.add(unset)
        logger.warning("storage: %s not set; S3 credentials come from the AWS default chain (%s)",
                       " and ".join(unset), ", ".join(chain))
    # Never one static half with the chain's other half: all or nothing.
    return {}


# One storage operation's deadline, every retry of every layer included: a minute for the
# round trips, plus the bytes at 1 MiB/s (a part of 100 MiB: ~2.7 min). A run that meets a dead
# endpoint stops with the URL named instead of waiting on it for hours.
DEADLINE_BASE_S = 60.0
DEADLINE_BYTES_PER_S = 2**20
_FOOTER_GUESS = 64 * 2**10  # most parts' footers fit in one read of this tail


def deadline_s(size: int = 0) -> float:
    """How long one storage operation moving ``size`` bytes may take."""
    return DEADLINE_BASE_S + size / DEADLINE_BYTES_PER_S


CONNECT_TIMEOUT_S = 10.0  # an S3 endpoint that does not accept the connection in this long is down
READ_TIMEOUT_S = 120.0  # nor one that accepted it and sends nothing back in this long
FIRST_LOOK_S = 5.0  # connect and read timeouts of ``check_reachable``'s first look
# ... also for the S3 paths opened without a storage section (a config's URL, a knowledge file,
# a download): fsspec's defaults for every S3 filesystem made without config_kwargs of its own
fsspec.config.conf.setdefault("s3", {}).setdefault(
    "config_kwargs", {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S,
                      "retries": {"max_attempts": 4, "mode": "standard"}})


def storage_options(spec: StorageSpec, url: str | None = None) -> dict:
    """fsspec options for a path of the storage section ``spec`` (``url``, its root by default):
    an S3 path, the root or another (a call cache, a knowledge file), is addressed as the section
    configures, endpoint and credentials from its named environment variables, else from
    botocore's default chain (see `_static_keys`), never from a default it was not given. Every
    S3 request connects within ``CONNECT_TIMEOUT_S`` and answers within ``READ_TIMEOUT_S``, retried
    by botocore: no path hangs a run."""
    opts: dict = {}
    if (url or spec.root).startswith("s3://"):
        client_kwargs: dict = {}
        if spec.endpoint_url:
            client_kwargs["endpoint_url"] = spec.endpoint_url
        if spec.region:
            client_kwargs["region_name"] = spec.region
        if client_kwargs:
            opts["client_kwargs"] = client_kwargs
        opts.update(_static_keys(spec))
        # transient S3 errors (throttling, 5xx, dropped connections) are retried by botocore
        opts.setdefault("config_kwargs", {"retries": {"max_attempts": 8, "mode": "adaptive"},
                                          "connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S})
    return opts


@dataclass
class Location:
    """A filesystem and a path inside it; picklable, so Ray workers can write directly."""

    fs: fsspec.AbstractFileSystem
    path: str

    @classmethod
    def from_url(cls, url: str, spec: StorageSpec | None = None) -> Location:
        opts = storage_options(spec, url) if spec and url.startswith("s3://") else {}
        if url.startswith("file://"):
            url = os.path.abspath(url[len("file://"):])
        fs, path = fsspec.core.url_to_fs(url, **opts)
        return cls(fs, path.rstrip("/"))

    def child(self, *parts: str) -> Location:
        return Location(self.fs, "/".join([self.path, *parts]))

    @property
    def url(self) -> str:
        proto = self.fs.protocol[0] if isinstance(self.fs.protocol, (tuple, list)) else self.fs.protocol
        return self.path if proto in ("file", "local") else f"{proto}://{self.path}"

    def _bounded(self, method: str, *args: object, size: int = 0, **kwargs: object) -> Any:
        """``self.fs.<method>(self.path, ...)`` done or refused within ``deadline_s(size)``, every
        layer's retries included (botocore's and s3fs's stack to over an hour on an endpoint that
        accepts and never answers): an object store's call runs on fsspec's event loop, which
        cancels it at the deadline. A local filesystem answers or fails by itself."""
        if not isinstance(self.fs, AsyncFileSystem):
            return getattr(self.fs, method)(self.path, *args, **kwargs)
        deadline = deadline_s(size)
        try:
            return getattr(self.fs, method)(self.path, *args, timeout=deadline, **kwargs)
        except FSTimeoutError:
            raise StorageError(f"{self.url}: storage did not answer within {deadline:.0f} s "
                               f"({method.removesuffix('_file')}, retries included)") from None

    def exists(self) -> bool:
        return bool(self._bounded("exists"))

    def size(self) -> int:
        """The object's size in bytes, within the deadline."""
        return int(self._bounded("size"))

    def read_bytes(self) -> bytes:
        """The whole object, within the deadline its size gives (an object store is asked its size
        first: one more request, so a large object is not cut off and a dead endpoint still is)."""
        if not isinstance(self.fs, AsyncFileSystem):
            return bytes(self.fs.cat_file(self.path))
        return bytes(self._bounded("cat_file", size=self.size()))

    def read_stream(self) -> IO[bytes]:
        """The object as a file read from memory, decompressed by its name's suffix (.gz, .bz2,
        .xz, .zst): read whole within its deadline, for inputs a reader parses at once."""
        data = io.BytesIO(self.read_bytes())
        codec = infer_compression(self.path)
        return compr[codec](data, mode="rb") if codec else data

    def download(self, dest: str) -> None:
        """A copy of the object at the local path ``dest``, within the deadline its size gives: for
        inputs too large to hold in memory (an article store)."""
        if not isinstance(self.fs, AsyncFileSystem):
            self.fs.get_file(self.path, dest)
            return
        self._bounded("get_file", dest, size=self.size())

    def read_tail(self, size: int) -> bytes:
        """The last ``size`` bytes (all of a smaller object), within the deadline."""
        return bytes(self._bounded("cat_file", start=-size, size=size))

    def parquet_metadata(self) -> pq.FileMetaData:
        """A Parquet object's footer, read by its tail (two bounded reads at most), not its rows."""
        tail = self.read_tail(_FOOTER_GUESS)
        if len(tail) < 12 or tail[-4:] != b"PAR1":
            raise StorageError(f"{self.url}: not a Parquet file (no footer)")
        need = int.from_bytes(tail[-8:-4], "little") + 8
        if need > len(tail):
            tail = self.read_tail(need)
        # the footer alone, behind the leading magic a reader checks: row groups are never read from it
        return pq.ParquetFile(pa.BufferReader(b"PAR1" + tail[-need:])).metadata

    def write_bytes_atomic(self, data: bytes) -> None:
        """Readers see the old object or the whole new one, never a half-written file.

        Object stores commit an object only when its upload completes; a local (or other POSIX)
        filesystem gets a temporary name in the same folder and a rename. A full disk (or a quota)
        leaves no temporary behind and is one line naming the file."""
        if isinstance(self.fs, LocalFileSystem):
            parent = os.path.dirname(self.path)
            os.makedirs(parent, exist_ok=True)
            tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}-{os.path.basename(self.path)}")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except OSError as err:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                _raise_if_full(err, self.path, len(data))
                raise
        else:
            self._bounded("pipe_file", data, size=len(data))

    @property
    def is_local(self) -> bool:
        """A path on this machine's filesystem (owners, modes and symbolic links apply)."""
        return isinstance(self.fs, LocalFileSystem)

    def list_names(self) -> list[str]:
        """Names directly under this folder, hidden temporaries excluded; [] if it does not exist."""
        try:
            entries = self._bounded("ls", detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return sorted(n for n in names if not n.startswith("."))

    def check_reachable(self, field: str = "storage.root") -> None:
        """Fail in seconds, in one line naming the URL, when this location's object store does not
        answer: an endpoint that does not connect, no credentials, no such bucket, access denied.
        The store's own client retries for about a minute (botocore adaptive, 8 attempts); this
        first look connects and waits for an answer for at most ``FIRST_LOOK_S`` each, twice. Local paths:
        nothing to check."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, (tuple, list)) else (self.fs.protocol,)
        if not {"s3", "s3a"} & set(protocols):
            return
        import s3fs
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        opts = dict(getattr(self.fs, "storage_options", None) or {})
        opts["config_kwargs"] = {**(opts.get("config_kwargs") or {}), "connect_timeout": FIRST_LOOK_S,
                                 "read_timeout": FIRST_LOOK_S,
                                 "retries": {"max_attempts": 2, "mode": "standard"}}
        quick = s3fs.S3FileSystem(**opts, skip_instance_cache=True)
        quick.retries = 1  # s3fs retries dropped connections itself, on top of botocore
        bucket, _, prefix = self.path.partition("/")
        endpoint = ((opts.get("client_kwargs") or {}).get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
                    or "AWS S3")
        try:
            quick.call_s3("list_objects_v2", Bucket=bucket, MaxKeys=1, Prefix=f"{prefix}/" if prefix else "")
        except NoCredentialsError:
            raise StorageError(f"{field} {self.url}: no S3 credentials: name the environment variables that hold "
                               "them in storage.access_key_env and storage.secret_key_env (or set "
                               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)") from None
        except FileNotFoundError:
            raise StorageError(f"{field} {self.url}: bucket {bucket!r} does not exist at {endpoint}") from None
        except PermissionError as err:
            raise StorageError(f"{field} {self.url}: access denied listing it at {endpoint} "
                               f"({_one_line(err)})") from None
        except (BotoCoreError, ClientError, OSError, ValueError) as err:
            raise StorageError(f"{field} {self.url}: cannot reach the S3 endpoint {endpoint} "
                               f"({type(err).__name__}: {_one_line(err)})") from None

    def remove(self) -> None:
        if self.exists():
            self._bounded("rm", recursive=True)


# ---- Files a cache reads back: only the ones it wrote ------------------------------------------
# A cache folder (``<storage.root>/_cache/...``) may be shared with other users or reachable by
# them; what a cache reads back decides answers and verdicts. On a local root a file is used only
# when it is a regular file directly in a real folder (neither followed through a symbolic link),
# owned by this user and writable by no one else. Object stores have no owners or links: there a
# cache's own digest check (see models/cache.py) is what remains.

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
PRIVATE_FILE_MODE = 0o644  # readable by all, writable only by this user, whatever the umask
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _raise_if_full(err: OSError, path: str, size: int) -> None:
    """A full disk (or quota) as one line naming the file."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise StorageFull(f"cannot write {path}: {os.strerror(err.errno)} ({size:,} bytes); "
                          "free space and resume the run") from None


class UntrustedPath(Exception):
    """A file or folder a cache must not use, and why (``url``, ``reason``)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url} {reason}")
        self.url = url
        self.reason = reason


def private_file_problem(st: os.stat_result) -> str | None:
    """Why an lstat/fstat result is not a file this user wrote for a cache, or None if it is."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if mode & OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(mode):04o})"
    if st.st_nlink > 1:  # a file this process writes has one name (written aside, then renamed)
        return f"has {st.st_nlink} hard links: its bytes can be changed under another name"
    return None


def private_folder_problem(st: os.stat_result) -> str | None:
    """Why an lstat result is not a folder of this user's that no one else can write to (where no
    one else can swap a checked file for another), or None if it is."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(mode):
        return "is not a folder"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if mode & OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(mode):04o})"
    return None


_DIGESTS: dict[tuple[int, int, int, int, int], str] = {}


def file_sha256(path: str, cache: bool = True) -> str:
    """sha256 of a local file, hashed once per process while its inode, size, mtime and ctime stay
    the same (a write changes the ctime, which no one can set): a model's hundreds of MB are read
    once per process, not at each use. A ``cache`` file (one a cache of this user's wrote) must
    pass ``private_file_problem`` - no link, hard or symbolic, owned by this user, writable by no
    one else - else UntrustedPath says why; another (an installed package's) is taken as it is."""
    try:
        fd = os.open(path, _FILE_FLAGS if cache else os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.ELOOP and cache:
            raise UntrustedPath(path, "is a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        problem = private_file_problem(st) if cache else None
        if problem:
            raise UntrustedPath(path, problem)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if stamp not in _DIGESTS:
            _DIGESTS[stamp] = hashlib.file_digest(f, "sha256").hexdigest()
        return _DIGESTS[stamp]


def _open_real_dir(folder: Location) -> int | None:
    """A descriptor of the local folder, opened without following a symbolic link in its last
    component; None if it does not exist; UntrustedPath if it is a link or not a folder."""
    try:
        return os.open(folder.path, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
        try:
            st = os.lstat(folder.path)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise UntrustedPath(folder.url, f"is a symbolic link (to {os.readlink(folder.path)})") from None
        raise UntrustedPath(folder.url, "is not a folder") from None


def list_private(folder: Location) -> list[str]:
    """Names directly under a cache folder (hidden temporaries excluded; [] if it does not exist).

    On a local filesystem the folder must be a folder itself, not a symbolic link to one:
    UntrustedPath otherwise (nothing under it is then read)."""
    if not folder.is_local:
        return folder.list_names()
    fd = _open_real_dir(folder)
    if fd is None:
        return []
    try:
        return sorted(n for n in os.listdir(fd) if not n.startswith("."))
    finally:
        os.close(fd)


def read_private(folder: Location, name: str) -> bytes:
    """The bytes of ``name`` directly under the cache folder ``folder``, if a cache of this user's
    wrote it: UntrustedPath says why not.

    Local filesystem: neither the folder nor the file is followed through a symbolic link (checked
    with lstat before opening, opened with O_NOFOLLOW relative to the folder, and the opened file
    must be the one checked); the file must be regular, owned by this user and writable by no one
    else. Other filesystems (S3, ...): the bytes as stored; the caller checks their digest."""
    if "/" in name or name in ("", ".", ".."):
        raise UntrustedPath(folder.child(name).url, "is not a file name")
    if not folder.is_local:
        return folder.child(name).read_bytes()
    url = folder.child(name).url
    dir_fd = _open_real_dir(folder)
    if dir_fd is None:
        raise FileNotFoundError(errno.ENOENT, "no such folder", folder.path)
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        problem = private_file_problem(before)
        if problem is None:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
            except OSError as err:
                if err.errno != errno.ELOOP:
                    raise
                problem = "is a symbolic link"
            else:
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    problem = private_file_problem(st)
                    if problem is None and (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
                        problem = "was replaced while it was being opened"
                    if problem is None:
                        return f.read()
        if problem == "is a symbolic link" and stat.S_ISLNK(before.st_mode):
            problem = f"is a symbolic link (to {os.readlink(name, dir_fd=dir_fd)})"
        raise UntrustedPath(url, problem)
    finally:
        os.close(dir_fd)


def write_private(folder: Location, name: str, data: bytes) -> None:
    """Write ``name`` directly under the cache folder ``folder`` atomically, as ``read_private``
    accepts it: locally the folder is made if missing (never followed through a symbolic link:
    UntrustedPath) and the file is mode 0644 whatever the umask. Other filesystems: an atomic
    object write (``Location.write_bytes_atomic``)."""
    if "/" in name or name.startswith(".") or not name:
        raise ValueError(f"not a cache file name: {name!r}")
    if not folder.is_local:
        folder.child(name).write_bytes_atomic(data)
        return
    os.makedirs(os.path.dirname(folder.path) or ".", exist_ok=True)
    try:
        os.mkdir(folder.path, 0o755)
    except FileExistsError:
        pass
    dir_fd = _open_real_dir(folder)
    if dir_fd is None:  # removed between mkdir and open
        raise FileNotFoundError(errno.ENOENT, "cache folder vanished", folder.path)
    tmp = f".tmp-{uuid.uuid4().hex}-{name}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE_MODE, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), PRIVATE_FILE_MODE)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as err:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            if isinstance(err, OSError):
                _raise_if_full(err, folder.child(name).path, len(data))
            raise
    finally:
        os.close(dir_fd)
