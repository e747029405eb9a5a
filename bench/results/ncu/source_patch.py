"""Experiment only: the source patches of the timeline scripts beside this
file. A script unpacks the build's Debian header packages, copies the tree
to .tl (prepare_tree) and patches files there at exact anchors; an anchor
that is not found stops it (the kernel has moved on: update the anchor)."""
import glob
import os
import shutil
import subprocess

# A device function that reads the global nanosecond timer.
TIMER = ('__device__ __forceinline__ unsigned long long tl_now() { unsigned long long t; '
         'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }\n')


def prepare_tree():
    shutil.rmtree('/tmp/nvfp4moe-deps', ignore_errors=True)
    os.makedirs('/tmp/nvfp4moe-deps')
    for deb in glob.glob('.deps/*.deb'):
        subprocess.run(['dpkg', '-x', deb, '/tmp/nvfp4moe-deps'], check=True)
    shutil.rmtree('.tl', ignore_errors=True)
    os.makedirs('.tl')
    for name in ['CMakeLists.txt', 'README.md']:
        shutil.copy(name, '.tl/')
    for name in ['bench', 'docs', 'fuzz', 'include', 'scripts', 'src', 'tests', 'tools']:
        shutil.copytree(name, os.path.join('.tl', name))


class Source:
    def __init__(self, path):
        self.path = path
        self.text = open(path).read()

    def rep(self, old, new):
        assert old in self.text, old
        self.text = self.text.replace(old, new, 1)

    def add_timeline(self, globals_, macros):
        """globals_ at the top of namespace nvfp4moe::cuda (the timeline
        array), then TIMER and macros (TL(i)) in its anonymous namespace."""
        self.rep('namespace nvfp4moe::cuda {\nnamespace {\n',
                 'namespace nvfp4moe::cuda {\n' + globals_ + 'namespace {\n' + TIMER + macros)

    def save(self):
        open(self.path, 'w').write(self.text)
