"""A test-class base that points ATTNJIT_CACHE_DIR at a fresh temporary directory for the
class's tests and restores the variable (and removes the directory) afterwards."""

import os
import shutil
import tempfile
import unittest


class TemporaryCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = tempfile.mkdtemp(prefix="attnjit-test-")
        cls.saved_cache = os.environ.get("ATTNJIT_CACHE_DIR")
        os.environ["ATTNJIT_CACHE_DIR"] = cls.cache

    @classmethod
    def tearDownClass(cls):
        if cls.saved_cache is None:
            os.environ.pop("ATTNJIT_CACHE_DIR", None)
        else:
            os.environ["ATTNJIT_CACHE_DIR"] = cls.saved_cache
        shutil.rmtree(cls.cache, ignore_errors=True)
