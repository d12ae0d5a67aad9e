from setuptools import find_packages, setup


setup(
    name="gmlp-transformers",
    version="0.1.0",
    description='gMLP and aMLP ("Pay Attention to MLPs") as Hugging Face Transformers models',
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["gmlp", "gmlp.*"]),
    include_package_data=True,
    package_data={"gmlp": ["metrics/*/*.py", "data/*"]},
    install_requires=[
        "torch>=2.4",
        "transformers>=5.23,<6",
        "tokenizers>=0.22",
        "safetensors",
        "datasets>=4",
        "evaluate>=0.4.6",
        "accelerate>=1.10",
        "scikit-learn",
        "scipy",
    ],
    extras_require={
        "dev": ["pytest>=8", "parameterized", "matplotlib", "peft>=0.17"],
        "vis": ["matplotlib"],
        # g-mlp-pytorch is the other gMLP the speed benchmark compares against (install it with --no-deps).
        "benchmarks": ["g-mlp-pytorch", "einops", "matplotlib"],
    },
)
