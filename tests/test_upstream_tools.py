"""tools/upstream_grad_half.py's selection of kornia's gradient tests, and what
tools/_upstream_recorder.py records about gradcheck calls (UPSTREAM_GRADCHECK=1)."""

import json
import sys
from pathlib import Path

import pytest
import torch

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import _upstream_recorder  # noqa: E402
import upstream_grad_half  # noqa: E402

pytestmark = pytest.mark.release_independent


@pytest.mark.parametrize(("node_id", "selected"), [
    ("tests/geometry/test_homography.py::TestFindHomography::test_gradcheck[cpu]", True),
    ("tests/geometry/test_conversions.py::TestDeg2Rad::test_deg2rad_gradcheck[cpu-float16]", True),
    ("tests/enhance/test_zca.py::TestZCA::test_grad_zca_with_fit[cpu-float16]", True),
    ("tests/feature/test_steerer.py::TestDiscreteSteerer::test_gradient_flow[cpu]", True),
    ("tests/augmentation/test_backward.py::TestRandomAffineBackward::test_param[cpu-float16-False-bilinear]", True),
    ("tests/augmentation/test_backward_3d.py::TestRandomAffine3DBackward::test_param[cpu-bfloat16-x]", True),
    # the class or the module mentions a gradient, the test does not compute one
    ("tests/filters/test_sobel.py::TestSpatialGradient::test_smoke[cpu-float16-sobel-1]", False),
    ("tests/morphology/test_gradient.py::TestGradient::test_cardinality[cpu-float16]", False),
    ("tests/filters/test_otsu_thresholding.py::TestOtsuThreshold::test_gradual_threshold[cpu-float16]", False),
    ("tests/geometry/test_homography.py::TestFindHomography::test_dynamo[cpu-float16-inductor]", False),
])
def test_the_selection_keeps_tests_named_for_a_gradient(node_id, selected):
    assert upstream_grad_half.is_gradient_test(node_id) is selected


def test_the_recorder_records_gradchecks_dtypes_and_leaves_the_check_alone(tmp_path, monkeypatch):
    record = tmp_path / "run.jsonl"
    monkeypatch.setenv("UPSTREAM_RECORD", str(record))
    originals = torch.autograd.gradcheck, torch.autograd.gradgradcheck
    try:
        _upstream_recorder._wrap_gradchecks()
        assert torch.autograd.gradcheck is not originals[0]
        _upstream_recorder._CURRENT.update(id="t::a", seen=set())
        x = torch.rand(3, dtype=torch.float64, requires_grad=True)
        scale = torch.rand(3, dtype=torch.float32)
        assert torch.autograd.gradcheck(lambda a, s: a * s.double(), (x, scale)) is True
        assert torch.autograd.gradcheck(lambda a, s: a * s.double(), (x, scale)) is True  # the same dtypes: once
        bad = torch.autograd.gradcheck(lambda a: a.detach() * 2 + a, (x,), raise_exception=False)
        assert bad is originals[0](lambda a: a.detach() * 2 + a, (x,), raise_exception=False) is False
    finally:
        torch.autograd.gradcheck, torch.autograd.gradgradcheck = originals
        _upstream_recorder._CURRENT.update(id=None, seen=set())
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert entries == [
        {"event": "gradcheck", "id": "t::a", "fn": "gradcheck", "dtypes": ["float32", "float64"],
         "requires_grad_dtypes": ["float64"]},
        {"event": "gradcheck", "id": "t::a", "fn": "gradcheck", "dtypes": ["float64"], "requires_grad_dtypes": ["float64"]},
    ]
