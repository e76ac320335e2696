"""GET /v1/models and /v1/models/{model_id}: the model catalog (ids contain '/')."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response

from planner.api.catalogs import CatalogsDep
from planner.api.problems import problem_responses
from planner.api.responses import model_response
from planner.api.schemas import ModelDetail, ModelList, ModelSummary
from planner.models import ModelArchitecture
from planner.units import DTYPE_BYTES

router = APIRouter(prefix="/models", tags=["models"], responses=problem_responses([500]))

#: weight dtypes the API accepts, in the order the detail lists them
_WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")


def _summary_fields(arch: ModelArchitecture) -> dict[str, object]:
    return {
        "id": arch.id,
        "model_type": arch.model_type,
        "aliases": list(arch.aliases),
        "num_layers": arch.num_layers,
        "hidden_size": arch.hidden_size,
        "vocab_size": arch.vocab_size,
        "total_params": arch.total_params,
        "active_params": arch.active_params,
        "native_weight_dtype": arch.native_weight_dtype,
        "source": arch.source,
    }


def model_detail(arch: ModelArchitecture) -> ModelDetail:
    """Architecture summary of one model: groups, parameters, weight and KV bytes."""
    weight_dtype = arch.native_weight_dtype or "bf16"
    kv_dtype = arch.default_kv_dtype(weight_dtype)
    return ModelDetail.model_validate(
        _summary_fields(arch)
        | {
            "layer_groups": [asdict(group) for group in arch.layer_groups],
            "weight_bytes": {dtype: arch.weight_bytes(DTYPE_BYTES[dtype]) for dtype in _WEIGHT_DTYPES},
            "default_weight_dtype": weight_dtype,
            "default_kv_dtype": kv_dtype,
            "kv_cache_bytes_per_token": arch.kv_cache_bytes_per_token(DTYPE_BYTES[kv_dtype]),
        }
    )


@router.get("", response_model=ModelList)
def list_models(catalogs: CatalogsDep) -> Response:
    """Every model in the catalog with its size; details at /v1/models/{model_id}."""
    models = catalogs.models
    return model_response(ModelList(
        models=[ModelSummary.model_validate(_summary_fields(models.get(i))) for i in models.ids()]
    ))


@router.get("/{model_id:path}", response_model=ModelDetail, responses=problem_responses([404, 422]))
def get_model(model_id: Annotated[str, Path(max_length=200)], catalogs: CatalogsDep) -> Response:
    """One model by Hugging Face repo id or alias (case-insensitive); 404 lists the closest ids."""
    return model_response(model_detail(catalogs.models.get(model_id)))
