#!/usr/bin/env python3
"""Regenerates the zip / zstd / safetensors test vectors with real tools.

Needs: torch (torch.save, torch.distributed.checkpoint), safetensors, zstandard
(`pip install zstandard`; torch's ZStandard DCP extension uses it too).

Writes, next to this script:
  tensor_f32.pt     torch.save(float32 2x3 arange) into BytesIO (root "archive")
  common.pt         torch.save of a dict into a file named common.pt (root "common")
  object.pt         torch.save of a dict holding three tensors + plain values
  big_u8.pt         torch.save of a 10000-byte uint8 tensor (archive > the 8 KiB tail read)
  classic.zip       the records of tensor_f32.pt rewritten by Python's zipfile: stored, no
                    zip64 trailer, no alignment padding, with an archive comment
  deflated.zip      the same records, deflate-compressed
  plain.distcp      a real DCP data file (dcp.save, default writer): BYTE_IO + tensor archives
  zstd.distcp       the same state dict saved with _extensions=[ZStandard()] (stream.zstd/1)
  st.distcp         the same with serialization_format=SAFETENSORS (zip + safetensors blob)
  zstd_sized.zst    zstandard.ZstdCompressor().compress(tensor_f32.pt): content size present
  zstd_multi.zst    two frames (streamed, no content size) concatenated: tensor_f32.pt twice
  model.safetensors safetensors.torch.save_file with many dtypes, a 0-d and an empty tensor
  manifest.txt      the oracle, computed here with Python's zipfile / safetensors / json:
      archive <file> <offset> <length> <root> <nrecords> <transforms|->
      record <name> <data_offset> <size> <crc32 hex>        (offsets relative to the archive)
      blob <file> <offset> <header_len> <ntensors>
      tensor <name> <dtype> <data_offset> <size> <crc32 hex> <ndim> <dims...>  (file offsets)
"""
import io
import os
import struct
import sys
import tempfile
import zipfile
import zlib

import torch
import torch.distributed.checkpoint as dcp
import zstandard
from safetensors.torch import save_file
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.filesystem import SerializationFormat

HERE = os.path.dirname(os.path.abspath(__file__))
manifest = []


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def saved(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    return b.getvalue()


def describe_zip(fname, blob, offset, length, transforms="-"):
    """Oracle for one archive (decoded bytes `blob`), found at [offset, offset+length)."""
    z = zipfile.ZipFile(io.BytesIO(blob))
    infos = z.infolist()
    root = infos[0].filename.split("/", 1)[0]
    manifest.append(f"archive {fname} {offset} {length} {root} {len(infos)} {transforms}")
    for i in infos:
        h = blob[i.header_offset : i.header_offset + 30]
        assert h[:4] == b"PK\x03\x04"
        nlen, xlen = struct.unpack("<HH", h[26:30])
        start = i.header_offset + 30 + nlen + xlen
        data = blob[start : start + i.compress_size]
        crc = zlib.crc32(z.read(i.filename)) if i.compress_type == 0 else zlib.crc32(data)
        manifest.append(f"record {i.filename} {start} {i.compress_size} {crc:08x}")
    has64 = blob.rfind(b"PK\x06\x06") >= 0 and blob[-42:-38] == b"PK\x06\x07"
    print(f"{fname}@{offset}: {len(infos)} records, zip64 trailer: {has64}, root {root!r}")
    return infos


def main():
    torch.manual_seed(0)
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tensor_pt = saved(t)
    write("tensor_f32.pt", tensor_pt)
    describe_zip("tensor_f32.pt", tensor_pt, 0, len(tensor_pt))

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "common.pt")
        torch.save({"iteration": 7, "args": ["a", "b"]}, p)
        common = open(p, "rb").read()
    write("common.pt", common)
    describe_zip("common.pt", common, 0, len(common))

    obj = {
        "a": torch.tensor([1, 2, 3], dtype=torch.int64),
        "b": torch.tensor([[1.5, -2.0], [0.25, 8.0]], dtype=torch.bfloat16),
        "c": torch.tensor(True),
        "lr": 0.001,
        "names": ["x", "y"],
    }
    objpt = saved(obj)
    write("object.pt", objpt)
    describe_zip("object.pt", objpt, 0, len(objpt))

    big = saved((torch.arange(10000) % 251).to(torch.uint8))
    write("big_u8.pt", big)
    describe_zip("big_u8.pt", big, 0, len(big))

    src = zipfile.ZipFile(io.BytesIO(tensor_pt))
    for name, method in (("classic.zip", zipfile.ZIP_STORED), ("deflated.zip", zipfile.ZIP_DEFLATED)):
        b = io.BytesIO()
        with zipfile.ZipFile(b, "w", method) as out:
            for i in src.infolist():
                out.writestr(i.filename, src.read(i.filename))
            if method == zipfile.ZIP_STORED:
                out.comment = b"ckptfs test comment"
        write(name, b.getvalue())
        describe_zip(name, b.getvalue(), 0, len(b.getvalue()))

    sd = {
        "w": t,
        "b": torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16),
        "lr": 0.001,
    }
    with tempfile.TemporaryDirectory() as d:
        for name, kw in (
            ("plain", {}),
            ("zstd", {"_extensions": [ZStandard()]}),
            ("st", {"serialization_format": SerializationFormat.SAFETENSORS}),
        ):
            path = os.path.join(d, name)
            dcp.save(sd, storage_writer=FileSystemWriter(path, **kw))
            files = [f for f in os.listdir(path) if f.endswith(".distcp")]
            assert len(files) == 1, files
            data = open(os.path.join(path, files[0]), "rb").read()
            write(f"{name}.distcp", data)
            md = FileSystemReader(path).read_metadata()
            blob_done = False
            for idx, info in md.storage_data.items():
                raw = data[info.offset : info.offset + info.length]
                tr = ",".join(info.transform_descriptors or []) or "-"
                if name == "st" and idx.fqn != "lr":
                    if not blob_done:
                        describe_safetensors(f"{name}.distcp", data, info.offset)
                        blob_done = True
                    continue
                blob = raw
                if tr == "stream.zstd/1":
                    blob = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
                describe_zip(f"{name}.distcp", blob, info.offset, info.length, tr)

    write("zstd_sized.zst", zstandard.ZstdCompressor(level=3).compress(tensor_pt))
    multi = io.BytesIO()
    for _ in range(2):
        w = zstandard.ZstdCompressor().stream_writer(multi, closefd=False)
        w.write(tensor_pt)
        w.flush(zstandard.FLUSH_FRAME)
    write("zstd_multi.zst", multi.getvalue())
    assert zstandard.get_frame_parameters(multi.getvalue()).content_size == zstandard.CONTENTSIZE_UNKNOWN

    tensors = {
        "f32": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float32),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "f8e4m3": torch.tensor([0.5, 1.0, 2.0], dtype=torch.float8_e4m3fn),
        "f8e5m2": torch.tensor([4.0], dtype=torch.float8_e5m2),
        "flag": torch.tensor([True, False, True]),
        "i64": torch.tensor([-1, 2**40], dtype=torch.int64),
        "u16": torch.tensor([1, 65535], dtype=torch.uint16),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "scalar": torch.tensor(3.25, dtype=torch.float64),
        "empty": torch.zeros((0, 4), dtype=torch.float16),
        "layers.0.w\u00e9": torch.tensor([7], dtype=torch.int8),
    }
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "model.safetensors")
        save_file(tensors, p, metadata={"format": "pt", "note": "caf\u00e9 \"q\""})
        st = open(p, "rb").read()
    write("model.safetensors", st)
    describe_safetensors("model.safetensors", st, 0)

    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write("# generated by gen.py with torch %s; do not edit\n" % torch.__version__)
        f.write("\n".join(manifest) + "\n")


def describe_safetensors(fname, data, offset):
    import json

    (n,) = struct.unpack("<Q", data[offset : offset + 8])
    header = json.loads(data[offset + 8 : offset + 8 + n])
    header.pop("__metadata__", None)
    manifest.append(f"blob {fname} {offset} {n} {len(header)}")
    base = offset + 8 + n
    for name, e in header.items():
        b, en = e["data_offsets"]
        crc = zlib.crc32(data[base + b : base + en])
        dims = " ".join(str(x) for x in e["shape"])
        manifest.append(
            f"tensor {name} {e['dtype']} {base + b} {en - b} {crc:08x} {len(e['shape'])} {dims}".rstrip()
        )


if __name__ == "__main__":
    sys.exit(main())
