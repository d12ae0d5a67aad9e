"""What the project adds to Transformers' common model tests, which are fetched at test time (see `upstream.py`):
a generation tester and the common config kwargs, both written for this project because the release's source
distribution does not ship the files they stand in for."""
