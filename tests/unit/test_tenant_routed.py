"""``tenant_routed`` decides per backend class whether it implements TenantRouting (and caches that), so a class
that declares the capability without the methods is never routed, and another class's answer never leaks."""

from __future__ import annotations

from types import SimpleNamespace

from memroute.interfaces import tenant_routed


class _Declares:
    capabilities = SimpleNamespace(tenant_routing=True)


class _Implements(_Declares):
    def get_owned(self, api_key_id, memory_id):
        return None

    def get_many_owned(self, api_key_id, memory_ids):
        return {}

    def update_owned(self, api_key_id, memory_id, patch):
        return None

    def delete_owned(self, api_key_id, memory_id):
        return False


class _Undeclared(_Implements):
    capabilities = SimpleNamespace(tenant_routing=False)


def test_routed_only_when_declared_and_implemented_every_time():
    implements, declares, undeclared = _Implements(), _Declares(), _Undeclared()
    for _ in range(3):  # the cached answer is the first one's
        assert tenant_routed(implements) is implements
        assert tenant_routed(declares) is None
        assert tenant_routed(undeclared) is None
    assert tenant_routed(_Implements()) is not None and tenant_routed(_Declares()) is None
