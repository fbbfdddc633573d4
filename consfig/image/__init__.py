"""image: self-applying images.  Building and running one (`build`),
signing and publishing (`publish`), and what a pulling host runs
(`puller`, standard library and ssh-keygen only).  An image's own
`__main__.py` is `consfig/ui/image_main.py`.

May import: every layer below it, up to converge.
"""
from consfig.moved import forward as _forward

# `consfig.image` was the module `build` is now.
__getattr__ = _forward(__name__)
