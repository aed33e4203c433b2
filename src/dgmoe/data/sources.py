"""Where each catalogue dataset can be downloaded from, declared once, as data (`dgmoe data download`).

A `Download` installs one folder under the data dir (`dir_name`, the folder the catalogue's datasets read) from
the first of its `sources` that works: the original first (the address DomainBed's `download.py` or WILDS'
dataset classes use, or the authors'), then any named mirror. A source is one or more `Part`s (archives or plain
files), each with its size and the checksum its publisher gives (None where none is published: then only the
content fingerprint after unpacking can tell the version). `layout_verified` is True only where the archive's
layout was checked from this project; the table and the command say so otherwise. `kind`: "http" (a URL),
"gdrive" (a Google Drive file id, fetched with the optional `gdown`), "hub" (a Hugging Face Hub repo, fetched
with `huggingface_hub` at `revision`) or "manual" (a licence to accept by hand: the command says what to fetch
and takes it with `--archive FILE`). A dataset without a public source says why (`reason`).

The facts were read from DomainBed's `domainbed/scripts/download.py` (commit 050aa5c), WILDS' dataset classes
(`_versions_dict`: codalab bundles, compressed sizes), torchvision's MNIST class (the md5 of each file) and the
datasets' own pages; nothing here was downloaded from this project's machines.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("http", "gdrive", "hub", "manual")
#: the layout conversions a source may name (`dgmoe.data.install.CONVERSIONS`)
CONVERSION_NAMES = ("terra_incognita",)


@dataclass(frozen=True)
class Part:
    """One file of a source: `location` (URL, Drive id, Hub repo id or the page to get it from), the `filename`
    it is stored as (for "hub", its path in the repo), `size` in bytes and `md5`/`sha256` where published.
    `unpack`: an archive extracted (`root`: the folder inside it that holds the data, None: its top) into the
    dataset folder's sub-folder `into`; otherwise the file itself is placed there."""

    location: str
    filename: str
    size: int | None = None
    md5: str | None = None
    sha256: str | None = None
    unpack: bool = True
    root: str | None = None
    into: str = ""


@dataclass(frozen=True)
class Source:
    """A way to get the whole folder: `name` (who publishes it), `kind` (`KINDS`), its `parts`, `licence`,
    `layout_verified`, the Hub `revision` (and `repo_type`), a layout `convert`ion and a `note` to print."""

    name: str
    kind: str
    parts: tuple[Part, ...]
    licence: str
    layout_verified: bool = False
    revision: str | None = None
    repo_type: str = "dataset"
    convert: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"source kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "hub" and not self.revision:
            raise ValueError(f"{self.name}: a hub source needs its revision")
        if self.convert is not None and self.convert not in CONVERSION_NAMES:
            raise ValueError(f"unknown conversion {self.convert!r} (known: {', '.join(CONVERSION_NAMES)})")


@dataclass(frozen=True)
class Download:
    """What `dgmoe data download NAME` installs: `<data_dir>/<dir_name>` for the catalogue `datasets`, from
    `sources` in order; `reason` says why there is none."""

    name: str
    dir_name: str
    datasets: tuple[str, ...]
    sources: tuple[Source, ...] = ()
    reason: str = ""


def _drive(file_id: str, filename: str, root: str | None, licence: str, note: str = "") -> Source:
    return Source("DomainBed's Google Drive copy", "gdrive", (Part(file_id, filename, root=root),), licence,
                  note=note)


def _codalab(bundle: str, size: int, licence: str) -> Source:
    return Source("WILDS (CodaLab bundle, as WILDS' dataset class)", "http",
                  (Part(f"https://worksheets.codalab.org/rest/bundles/{bundle}/contents/blob/", "archive.tar.gz",
                        size),), licence, note="WILDS publishes the size only, no checksum")


_RESEARCH = "research use, the authors' terms"
_MNIST = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_MNIST_FILES = (("train-images-idx3-ubyte.gz", 9912422, "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
                ("train-labels-idx1-ubyte.gz", 28881, "d53e105ee54ea40749a09fcbcd1e9432"),
                ("t10k-images-idx3-ubyte.gz", 1648877, "9fb629c4189551a2d022fa330f9573f3"),
                ("t10k-labels-idx1-ubyte.gz", 4542, "ec29112dd5afa0611ce80d1b7f02629c"))
_DOMAIN_NET = "http://csr.bu.edu/ftp/visda/2019/multi-source/"
_BERKELEY = "https://people.eecs.berkeley.edu/~hendrycks/"
_OOP_REPO = "PTeterwak/DomainBed_OOP"

DOWNLOADS: tuple[Download, ...] = (
    Download("PACS", "PACS", ("PACS", "PACS-OOP"), (
        _drive("1JFr8f805nMUelQWWmfnJR3y4_SYoN5Pd", "PACS.zip", "kfold", _RESEARCH,
               "authors' page: https://domaingeneralization.github.io (Li et al., ICCV 2017)"),)),
    Download("VLCS", "VLCS", ("VLCS", "VLCS-OOP"), (
        _drive("1skwblH1_okBwxWxmRsp9_qi15hyPpxg8", "VLCS.tar.gz", "VLCS", _RESEARCH),)),
    Download("OfficeHome", "office_home", ("OfficeHome", "OfficeHome-OOP"), (
        _drive("1uY0pj7oFsjMxRwaD3Sxy0jgel0fsYXLC", "office_home.zip", "OfficeHomeDataset_10072016",
               "research and non-commercial use (Venkateswara et al.)"),)),
    Download("TerraIncognita", "terra_incognita", ("TerraIncognita", "TerraIncognita-OOP"), (
        Source("LILA (Caltech Camera Traps), as DomainBed's download", "http", (
            Part("https://lilablobssc.blob.core.windows.net/caltechcameratraps/eccv_18_all_images_sm.tar.gz",
                 "eccv_18_all_images_sm.tar.gz", into="images"),
            Part("https://lilablobssc.blob.core.windows.net/caltechcameratraps/labels/caltech_camera_traps.json.zip",
                 "caltech_camera_traps.json.zip", into="labels")),
            "Community Data License Agreement (permissive)", convert="terra_incognita",
            note="converted as DomainBed does (locations 38, 43, 46, 100; its 10 classes): the 24,330-image "
                 "version"),)),
    Download("TerraIncognita-24788", "terra_incognita", ("TerraIncognita",),
             reason="the 24,788-image version of DomainBed's, SWAD's and MIRO's papers came from an archive "
                    "that has since moved; no public copy of it is known (khanrc/miro#9)"),
    Download("DomainNet", "domain_net", ("DomainNet", "DomainNet-OOP"), (
        Source("the authors' server (BU), as DomainBed's download", "http", tuple(
            Part(_DOMAIN_NET + path, path.rsplit("/", 1)[-1]) for path in (
                "groundtruth/clipart.zip", "infograph.zip", "groundtruth/painting.zip", "quickdraw.zip", "real.zip",
                "sketch.zip")), "fair use for research (the authors' terms)",
            note="DomainBed then deletes the files of its domain_net_duplicates.txt; dgmoe keeps every file"),)),
    Download("MNIST", "MNIST", ("RotatedMNIST", "ColoredMNIST", "GeoMNIST"), (
        Source("Yann LeCun's page (the original)", "http", tuple(
            Part("http://yann.lecun.com/exdb/mnist/" + f, f, n, md5, unpack=False, into="raw")
            for f, n, md5 in _MNIST_FILES), "CC BY-SA 3.0"),
        Source("torchvision's mirror (ossci-datasets)", "http", tuple(
            Part(_MNIST + f, f, n, md5, unpack=False, into="raw") for f, n, md5 in _MNIST_FILES), "CC BY-SA 3.0"),)),
    Download("CUB", "CUB_200_2011", ("CUBDG",), (
        Source("Caltech data repository (the authors')", "http", (
            Part("https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz", "CUB_200_2011.tgz",
                 1150585339, "97eceeb196236b17998738112f37df78", root="CUB_200_2011"),),
            "research and non-commercial use",
            note="CUB-DG's stylised domains are not published: make CUB_DG/ from it as dgmoe.data.cub describes"),)),
    Download("NICOpp", "NICO", ("NICOpp",), (
        Source("the authors (NICO++, Zhang et al., CVPR 2023)", "manual", (
            Part("https://github.com/xxgege/NICO-plus", "NICO_DG.zip", root="NICO"),), "the authors' terms",
            note="the authors hand the DG track out from their page: fetch its archive by hand, then "
                 "--archive FILE (the folder NICO/<domain>/<class>/<image> inside it)"),)),
    Download("Spawrious", "spawrious224", tuple(f"Spawrious{s}" for s in (
        "M2M_easy", "M2M_hard", "M2M_medium", "O2O_easy", "O2O_hard", "O2O_medium")), (
        Source("the authors' Dropbox, as DomainBed's download", "http", (
            Part("https://www.dropbox.com/s/e40j553480h3f3s/spawrious224.tar.gz?dl=1", "spawrious224.tar.gz",
                 root="spawrious224"),), "CC BY 4.0 (Lynch et al.)"),)),
    Download("SVIRO", "sviro", ("SVIRO",), (
        Source("DFKI (the authors), as DomainBed's download", "http", (
            Part("https://sviro.kl.dfki.de/?wpdmdl=1731", "sviro_grayscale_rectangle_classification.zip",
                 root="SVIRO_DOMAINBED"),), "CC BY-NC-SA 4.0"),)),
    Download("FMoW", "fmow_v1.1", ("FMoW", "FMoW-LAO", "WILDSFMoW"), (
        _codalab("0xaec91eb7c9d548ebb15e1b5e60f966ab", 53_893_324_800, "fMoW licence (github.com/fMoW/dataset)"),)),
    Download("iWildCam", "iwildcam_v2.0", ("iWildCam",), (
        _codalab("0x6313da2b204647e79a14b468131fcd64", 11_957_420_032,
                 "Community Data License Agreement (permissive)"),)),
    Download("Camelyon17", "camelyon17_v1.0", ("Camelyon17",), (
        _codalab("0xe45e15f39fb54e9d9e919556af67aabe", 10_658_709_504, "CC0 1.0"),)),
    Download("ImageNet", "imagenet", ("ImageNetShifts",), (
        Source("image-net.org (licence accepted by hand)", "manual", (
            Part("https://image-net.org/download-images.php", "imagenet.tar"),), "ImageNet terms of access",
            note="make imagenet/train/<wnid>/ and imagenet/val/<wnid>/ (the validation images sorted into class "
                 "folders), pack them as one archive with train/ and val/ at its top, then --archive FILE"),)),
    Download("ImageNet-V2", "imagenetv2-matched-frequency-format-val", ("ImageNetShifts",), (
        Source("the authors' release on the Hugging Face Hub (vaishaal/ImageNetV2)", "http", (
            Part("https://huggingface.co/datasets/vaishaal/ImageNetV2/resolve/main/"
                 "imagenetv2-matched-frequency.tar.gz", "imagenetv2-matched-frequency.tar.gz",
                 root="imagenetv2-matched-frequency-format-val"),), "MIT (code); images from Flickr"),
        Source("the authors' original S3 bucket", "http", (
            Part("https://s3-us-west-2.amazonaws.com/imagenetv2public/imagenetv2-matched-frequency.tar.gz",
                 "imagenetv2-matched-frequency.tar.gz", root="imagenetv2-matched-frequency-format-val"),),
            "MIT (code); images from Flickr"),)),
    Download("ImageNet-R", "imagenet-r", ("ImageNetShifts",), (
        Source("the authors (Berkeley)", "http", (Part(_BERKELEY + "imagenet-r.tar", "imagenet-r.tar",
                                                       root="imagenet-r"),), "MIT"),)),
    Download("ImageNet-Sketch", "sketch", ("ImageNetShifts",), (
        Source("the authors' Google Drive (HaohanWang/ImageNet-Sketch)", "gdrive", (
            Part("1Mj0i5HBthqH1p_yeXzsg22gZduvgoNeA", "ImageNet-Sketch.zip", root="sketch"),), "MIT"),)),
    Download("ImageNet-A", "imagenet-a", ("ImageNetShifts",), (
        Source("the authors (Berkeley)", "http", (Part(_BERKELEY + "imagenet-a.tar", "imagenet-a.tar",
                                                       root="imagenet-a"),), "MIT"),)),
    Download("ObjectNet", "objectnet-1.0", ("ImageNetShifts",), (
        Source("objectnet.dev (licence accepted by hand)", "manual", (
            Part("https://objectnet.dev/download.html", "objectnet-1.0.zip", root="objectnet-1.0"),),
            "ObjectNet licence (no training on it)",
            note="the zip is password-protected: unzip it with the password the page gives, re-pack "
                 "objectnet-1.0/ without one, then --archive FILE"),)),
    Download("DomainBed-OOP", "DomainBed_OOP/hard", tuple(f"{b}-OOP" for b in (
        "PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet")), (
        Source("the authors' Hugging Face Hub dataset", "hub", tuple(
            Part(_OOP_REPO, f"hard/{d}.tar.gz") for d in ("PACS", "VLCS", "office_home", "terra_incognita",
                                                          "domain_net")),
            "the base datasets' terms", revision="main",
            note="revision 'main' (not pinned: no commit was read from here); the full datasets are needed too"),)),
    Download("Debug", "", ("Debug28", "Debug224"), reason="random tensors made in memory: nothing to download"),
    Download("ImageFolder", "", ("ImageFolder",), reason="your own <domain>/<class>/<image> folder"),
    Download("Sentinel2Sample", "", ("Sentinel2Sample",),
             reason="GeoLifeCLEF 2023's Sentinel-2 sample, read from the shared data folder; no public archive is "
                    "declared"),
)


def downloads() -> dict[str, Download]:
    """Every `Download` by name."""
    return {d.name: d for d in DOWNLOADS}


def _size(source: Source) -> str:
    sizes = [p.size for p in source.parts]
    if any(s is None for s in sizes):
        return "not published"
    total = sum(s for s in sizes if s is not None)
    return f"{total / 2**30:.1f} GiB" if total >= 2**30 else f"{total / 2**20:.1f} MiB"


def _checksum(source: Source) -> str:
    kinds = {k for p in source.parts for k, v in (("md5", p.md5), ("sha256", p.sha256)) if v}
    return "/".join(sorted(kinds)) + (" per file" if len(source.parts) > 1 else "") if kinds else "none published"


def source_table():
    """Every download and its sources as a `dgmoe.document.Table` (one row per source, or the reason for none);
    README.md shows it (`dgmoe data download --list --markdown`)."""
    from dgmoe.document import Table

    rows = []
    for d in DOWNLOADS:
        serves = ", ".join(d.datasets)
        folder = d.dir_name or "-"
        if not d.sources:
            rows.append([d.name, folder, serves, f"none: {d.reason}", "-", "-", "-", "-", "-", ""])
        for i, s in enumerate(d.sources):
            where = s.name + (f" @ {s.revision}" if s.revision else "")
            rows.append([d.name if i == 0 else "", folder if i == 0 else "", serves if i == 0 else "",
                         f"{i + 1}. {where}", s.kind, _size(s), _checksum(s), s.licence,
                         "yes" if s.layout_verified else "not verified", s.note])
    return Table.make("Dataset sources", ("dataset", "folder", "for", "source (tried in order)", "kind", "size",
                                          "checksum", "licence", "layout", "note"), rows, left=10)
