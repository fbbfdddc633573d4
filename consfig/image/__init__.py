"""image: self-applying images.  Building and running one (`build`),
signing and publishing (`publish`), and what a pulling host runs
(`puller`, standard library and ssh-keygen only).  An image's own
`__main__.py` is `consfig/ui/image_main.py`.

May import: every layer below it, up to converge.
"""
