"""Map import names to the distributions that provide them (``PIL`` -> ``pillow``)."""

from __future__ import annotations

import importlib.metadata
from functools import lru_cache

_KNOWN: dict[str, str] = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "yaml": "PyYAML",
    "cv2": "opencv-python-headless",
    "bs4": "beautifulsoup4",
    "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "jwt": "PyJWT",
    "magic": "python-magic",
    "serial": "pyserial",
    "usb": "pyusb",
    "git": "GitPython",
    "google": "protobuf",
    "attr": "attrs",
    "skimage": "scikit-image",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "telegram": "python-telegram-bot",
    "discord": "discord.py",
    "fitz": "PyMuPDF",
    "Levenshtein": "python-Levenshtein",
    "mpl_toolkits": "matplotlib",
    "tensorflow": "tensorflow-cpu",
    "OpenSSL": "pyOpenSSL",
    "websocket": "websocket-client",
    "sentencepiece": "sentencepiece",
    "bson": "pymongo",
    "lz4": "lz4",
    "zmq": "pyzmq",
    "RPi": "RPi.GPIO",
    "win32api": "pywin32",
    "pkg_resources": "setuptools",
    "setuptools": "setuptools",
    "typing_extensions": "typing-extensions",
    "google.protobuf": "protobuf",
    "grpc": "grpcio",
    "nacl": "PyNaCl",
    "Bio": "biopython",
    "igraph": "python-igraph",
    "slugify": "python-slugify",
    "multipart": "python-multipart",
    "pydantic_settings": "pydantic-settings",
    "jose": "python-jose",
    "socks": "PySocks",
    "odf": "odfpy",
    "hamcrest": "PyHamcrest",
}


@lru_cache(maxsize=1)
def _installed() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_for(import_name: str) -> str:
    """The distribution to ``pip install`` for a top-level import name.

    A table of well-known mismatches first, then the distributions installed here that
    provide the module (read once per process), then the import name itself.
    """
    top = import_name.split(".")[0]
    known = _KNOWN.get(import_name) or _KNOWN.get(top)
    if known:
        return known
    installed = _installed().get(top)
    return installed[0] if installed else top.replace("_", "-")
