"""UpdateFeatures (57): change finalized feature levels (KIP-584), validated as Kafka's
controller (FeatureControlManager.updateFeatures) validates them.

DescribeFeatures has no API of its own: the admin client reads ApiVersions' supported and
finalized features (handlers/api_versions.py, snakka.metadata.features). This handler checks
each update in Kafka's order and stops at the first failure, which fails the whole request:

- an upgrade type other than 1 (upgrade), 2 (safe downgrade), 3 (unsafe downgrade): "The
  controller does not support the given upgrade type.";
- a level below 0: "A feature version cannot be less than 0.";
- a level outside what this node supports (``SUPPORTED_FEATURES``; a feature it does not know is
  supported only at level 0): "Local controller <id> only supports versions <min>-<max>" /
  "Local controller <id> does not support this feature.";
- a lower level without a downgrade type, or a higher one with a downgrade type.

Each failure is INVALID_UPDATE_VERSION with Kafka's message ("Invalid update version <v> for
feature <name>. <reason>"), answered at the top level as "The update failed for all features
since the following feature had an error: ...". v0's ``allow_downgrade`` means a safe
downgrade. v0-1 success answers carry one NONE result per feature; v2 answers none.

What differs from Kafka: snakka's finalized levels are fixed (its group and transaction
protocols are built for them, and they are not part of the metadata log), so an update that
passes validation and sets every feature to its current level succeeds (nothing to do), a
``validate_only`` request that passes succeeds, and one that would really change a level is
refused with INVALID_UPDATE_VERSION and a message saying so, never acknowledged and dropped.
Kafka's dependency checks between features (on ``metadata.version``) have nothing to check:
snakka finalizes no ``metadata.version``.

Authorization: ALTER on the cluster (ControllerApis), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.features import FINALIZED_FEATURES, SUPPORTED_FEATURES
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.update_features_response import (
    UpdatableFeatureResult,
    UpdateFeaturesResponse,
)
from snakka.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from snakka.protocol.messages.update_features_request import UpdateFeaturesRequest

API = ApiDeclaration(ApiKey.UPDATE_FEATURES)

# FeatureUpdate.UpgradeType codes
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3
_UPGRADE_TYPES = frozenset({UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE})


def _range_text(lo: int, hi: int) -> str:
    """Kafka's VersionRange.toString."""
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _reason(node_id: int, feature: str, level: int, upgrade_type: int) -> str | None:
    """Why Kafka's controller refuses this update, or None."""
    if upgrade_type not in _UPGRADE_TYPES:
        return "The controller does not support the given upgrade type."
    current = FINALIZED_FEATURES.get(feature, 0)
    if level < 0:
        return "A feature version cannot be less than 0."
    lo, hi = SUPPORTED_FEATURES.get(feature, (0, 0))
    if not lo <= level <= hi:
        if hi == 0:
            return f"Local controller {node_id} does not support this feature."
        return f"Local controller {node_id} only supports versions {_range_text(lo, hi)}"
    if level < current and upgrade_type == UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade type "
                "to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return "Can't downgrade to a newer version."
    return None


def _failed(message: str) -> UpdateFeaturesResponse:
    return UpdateFeaturesResponse(
        throttle_time_ms=0, error_code=ErrorCode.INVALID_UPDATE_VERSION,
        error_message="The update failed for all features since the following feature had an "
                      f"error: {message}", results=[])


def handle(ctx: RequestContext, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    if not ctx.is_allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return UpdateFeaturesResponse(throttle_time_ms=0, error_code=code,
                                      error_message=code.message, results=[])
    v = ctx.api_version
    updates: dict[str, tuple[int, int]] = {}  # feature -> (level, upgrade type); last wins
    for u in req.feature_updates:
        upgrade_type = (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if v == 0 \
            else u.upgrade_type
        updates[u.feature] = (u.max_version_level, upgrade_type)
    for feature, (level, upgrade_type) in updates.items():
        reason = _reason(ctx.services.node_id, feature, level, upgrade_type)
        if reason is not None:
            return _failed(f"Invalid update version {level} for feature {feature}. {reason}")
    validate_only = req.validate_only if v >= 1 else False
    if not validate_only:
        for feature, (level, _t) in updates.items():
            if level != FINALIZED_FEATURES.get(feature, 0):
                return _failed(
                    f"Invalid update version {level} for feature {feature}. snakka cannot "
                    "change finalized feature levels: they are fixed at "
                    + ", ".join(f"{n}={lv}" for n, lv in FINALIZED_FEATURES.items()) + ".")
    results = [UpdatableFeatureResult(feature=u.feature, error_code=ErrorCode.NONE,
                                      error_message=None)
               for u in req.feature_updates] if v <= 1 else []
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                  error_message=None, results=results)
