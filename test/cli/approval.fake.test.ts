import { fakeTarget } from '../helpers/kube-target.ts';
import { approvalScenarios } from './approval-scenarios.ts';

approvalScenarios('fake API server', () => fakeTarget());
