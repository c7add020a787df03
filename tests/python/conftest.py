import os
import sys

# workers.py and ddp_support.py sit beside the tests; ranks (and the forkserver they fork from) inherit sys.path.
sys.path.insert(0, os.path.dirname(__file__))
