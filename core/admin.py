from django.contrib import admin

from core.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    list_display = ["created_at", "actor_name", "action", "target_type", "target_id", "tenant"]
    list_filter = ["action", "target_type", "tenant"]
    search_fields = ["actor_name", "target_id", "reason"]
    # The audit log is append-only, for people and for the admin alike.
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
