"""Where the course lives, and the links to open a chapter in Colab or ModelScope.

Fork the course? Change :data:`GITHUB_REPO` (and the ``REPO`` line of each notebook's setup cell);
``tests/test_notebooks.py`` checks that every notebook's header and the README agree with it.
"""

from __future__ import annotations

GITHUB_REPO = "triton-course/triton-kernels-course"
BRANCH = "main"

#: The nbgrader assignment ids, in course order; each is also the chapter's folder and notebook name.
CHAPTERS: dict[str, str] = {
    "01_gpu_model": "GPU model and occupancy",
    "02_benchmarking": "Benchmarking and profiling",
    "03_vector_add": "Vector addition",
    "04_gelu": "GELU",
    "05_softmax": "Softmax",
    "06_rmsnorm": "RMSNorm",
    "07_matmul_relu": "Matmul + ReLU tiling",
    "08_fusion": "Fusion analysis",
    "09_attention": "Attention offsets",
}


def notebook_path(assignment: str) -> str:
    """The student notebook of a chapter, relative to the repository root."""
    return f"notebooks/{assignment}/{assignment}.ipynb"


def colab_url(assignment: str) -> str:
    return f"https://colab.research.google.com/github/{GITHUB_REPO}/blob/{BRANCH}/{notebook_path(assignment)}"


def modelscope_url(assignment: str) -> str:
    """ModelScope opens notebooks from its own instances: the link starts one (CPU or A10) and the
    notebook's setup cell clones the course into it; the fragment names the notebook to open."""
    return f"https://modelscope.cn/my/mynotebook/preset#{notebook_path(assignment)}"


def badges(assignment: str) -> str:
    """The markdown line of badges that heads a chapter notebook and its README row."""
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(assignment)}) "
            f"[![Open in ModelScope](https://img.shields.io/badge/Open%20in-ModelScope-624aff)]"
            f"({modelscope_url(assignment)})")
