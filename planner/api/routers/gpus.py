"""GET /v1/gpus and /v1/gpus/{gpu_id}: the accelerator catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response

from planner.api.catalogs import CatalogsDep
from planner.api.problems import problem_responses
from planner.api.responses import model_response
from planner.api.schemas import GpuList, GpuOut
from planner.hardware import find_gpu, gpu_to_dict

router = APIRouter(prefix="/gpus", tags=["gpus"], responses=problem_responses([500]))


@router.get("", response_model=GpuList)
def list_gpus(catalogs: CatalogsDep) -> Response:
    """Every accelerator in the catalog, with its datasheet figures and their sources."""
    specs = sorted(catalogs.gpus.values(), key=lambda spec: spec.id)
    return model_response(GpuList(gpus=[GpuOut.model_validate(gpu_to_dict(spec)) for spec in specs]))


@router.get("/{gpu_id}", response_model=GpuOut, responses=problem_responses([404, 422]))
def get_gpu(gpu_id: Annotated[str, Path(max_length=200)], catalogs: CatalogsDep) -> Response:
    """One accelerator by id (case-insensitive); 404 lists the closest ids."""
    return model_response(GpuOut.model_validate(gpu_to_dict(find_gpu(catalogs.gpus, gpu_id))))
